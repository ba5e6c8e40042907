"""Issue 27, reading a published folder back: a damaged shard is an error for `datasets.load_dataset` as for
load_table (F12); a manifest that is unreadable (F19) or lacks an entry (F7) is one clear PublishError; a table of
0 rows loads with its columns (F10); load_table reads no file that an edited card names (issue 35, N29)."""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.io.schema import load_schema
from pipeline.run import main
from pipeline.tables.folders import PublishError
from pipeline.tables.load import load_table
from tests.conftest import SAMPLES

CAPTIONS = SAMPLES / "coco" / "captions_sample.json"
MANIFEST = ".hardpos-publish.json"  # as pipeline.tables.folders names it
SHARD = "data/order_eval/test-00000-of-00001.parquet"


@pytest.fixture(scope="module")
def order_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("order_run")
    assert main(["--stage=order_eval", f"--coco_captions={CAPTIONS}", f"--output_dir={out / 'order'}"]) == 0
    return out


@pytest.fixture
def hub(order_run, tmp_path, capsys) -> Path:
    """The sample's order_eval table (34 rows), published into a folder of its own."""
    runs = shutil.copytree(order_run, tmp_path / "runs")
    assert main(["--stage=publish", f"--output_dir={runs}", f"--publish_dir={tmp_path / 'hub'}"]) == 0
    capsys.readouterr()
    return tmp_path / "hub"


def errors(call) -> str:
    """The messages of the exception `call` raises and of its causes, on one line; fails when it raises none."""
    try:
        result = call()
    except Exception as e:  # noqa: BLE001 - which reader raises what is the point
        chain = []
        while e is not None:
            chain.append(f"{type(e).__name__}: {e}")
            e = e.__cause__ or e.__context__
        return " <- ".join(chain)
    pytest.fail(f"read without an error: {result}")


def test_f12_a_flipped_byte_in_a_published_shard_is_an_error_for_datasets(hub, tmp_path):
    import datasets

    shard = hub / SHARD
    data = bytearray(shard.read_bytes())
    data[data.index(b"sitting")] ^= 0x04  # one bit: "sitting" -> "witting", in a caption's data page
    shard.unlink()  # the published copy only: it is a hard link to the run's shard
    shard.write_bytes(bytes(data))

    for streaming in (False, True):  # the folder, read as the Hub repository it mirrors is read
        def load():
            return list(datasets.load_dataset(str(hub), "order_eval", split="test", streaming=streaming,
                                              cache_dir=str(tmp_path / f"hf_{streaming}")))
        assert "CRC checksum verification failed" in errors(load)
    assert "its sha256 differs from the one .hardpos-publish.json recorded" in \
        errors(lambda: load_table(str(hub), "order_eval", cache_dir=str(tmp_path / "hf_load_table")))
    # What a reader that opens the file itself gets: pyarrow checks the page checksums only when asked.
    assert "A little girl witting inside a cardboard box." in pq.read_table(shard).column("caption").to_pylist()
    assert "CRC checksum verification failed" in \
        errors(lambda: pq.read_table(shard, page_checksum_verification=True))


def test_f12_no_bit_flipped_anywhere_in_a_shard_reads_back_through_datasets_as_other_rows(hub, tmp_path):
    import datasets

    shard = hub / SHARD
    original = shard.read_bytes()
    shard.unlink()  # the published copy only

    def rows(name: str) -> list[dict]:
        return datasets.load_dataset(str(hub), "order_eval", split="test", cache_dir=str(tmp_path / name)).to_list()

    shard.write_bytes(original)
    expected, rng, silent = rows("intact"), random.Random(27), []
    for flip in range(60):  # without the page checks about a third of these read back as other values
        position = rng.randrange(len(original))
        damaged = bytearray(original)
        damaged[position] ^= 1 << rng.randrange(8)
        shard.write_bytes(bytes(damaged))
        try:
            if rows(f"flip{flip}") != expected:
                silent.append(position)
        except Exception:  # noqa: BLE001 - any error is the damage found
            pass
    assert silent == []


def test_f12_an_intact_published_folder_loads_with_the_checks_on(hub, tmp_path):
    import datasets

    card = (hub / "README.md").read_text()
    assert "  fragment_scan_options:\n    page_checksum_verification: true\n" in card
    loaded = datasets.load_dataset(str(hub), "order_eval", split="test", cache_dir=str(tmp_path / "hf"))
    assert loaded.num_rows == 34 and "A little girl sitting inside a cardboard box." in loaded["caption"]


def test_f19_an_unreadable_manifest_is_one_clear_line(hub, tmp_path, capsys):
    manifest = hub / MANIFEST
    for damaged, why in ((manifest.read_bytes()[:40], "unreadable: JSONDecodeError: "),
                         (b"\xff\xfe not UTF-8", "unreadable: UnicodeDecodeError: "),
                         (b"[]", "unreadable: TypeError: "),
                         (b'{"files": {"README.md": "x"}}', "no sha256 for README.md")):
        manifest.write_bytes(damaged)
        with pytest.raises(PublishError) as refused:
            load_table(str(hub), "order_eval", cache_dir=str(tmp_path / "hf"))
        message = str(refused.value)
        assert message.startswith(f"{manifest}: not a manifest that publish wrote ({why}") and "\n" not in message
        assert main(["--stage=publish", f"--output_dir={tmp_path / 'runs'}", f"--publish_dir={hub}"]) == 2
        assert capsys.readouterr().err == f"error: {message}\n"


def test_f7_load_table_refuses_a_manifest_missing_an_entry(hub, tmp_path):
    manifest = json.loads((hub / MANIFEST).read_text())
    manifest["files"][SHARD] = {}  # as a publish of 9d14726 cut off by a full disk left it
    (hub / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(PublishError, match=rf"^{hub / MANIFEST}: not a manifest that publish wrote \(no sha256 for "
                                           rf"{SHARD}\); publish the tables again into an empty folder$"):
        load_table(str(hub), "order_eval", cache_dir=str(tmp_path / "hf"))


def test_f10_a_table_with_no_rows_loads_with_its_columns(tmp_path, capsys):
    import datasets

    coco = json.loads(CAPTIONS.read_text())  # one caption that no order perturbation can shuffle
    coco["images"] = coco["images"][:1]
    coco["annotations"] = [{"image_id": coco["images"][0]["id"], "id": 1, "caption": "Dogs."}]
    captions = tmp_path / "captions.json"
    captions.write_text(json.dumps(coco))
    runs, hub = tmp_path / "runs", tmp_path / "hub"
    # an empty table is an error unless asked for (tests/test_loud_failures.py); asked for, it loads
    assert main(["--stage=order_eval", f"--coco_captions={captions}", f"--output_dir={runs / 'order'}",
                 "--allow_empty"]) == 0
    assert json.loads((runs / "order" / "report.json").read_text())["tables"]["order_eval"]["rows"] == 0
    capsys.readouterr()

    columns = load_schema("order_eval").arrow().names
    table = load_table(str(runs / "order"), "order_eval", cache_dir=str(tmp_path / "hf"))
    assert isinstance(table, datasets.Dataset) and table.num_rows == 0 and table.column_names == columns
    assert load_table(str(runs / "order"), "order_eval", split="test").split == "test"
    with pytest.raises(PublishError, match="has no split 'train', only 'test'"):
        load_table(str(runs / "order"), "order_eval", split="train")
    # publish puts no config without data in a card (datasets could not load it): it refuses, one line
    assert main(["--stage=publish", f"--output_dir={runs}", f"--publish_dir={hub}"]) == 2
    assert "table order_eval" in capsys.readouterr().err and not hub.exists()


def test_n29_load_table_never_reads_a_table_outside_the_folder_that_an_edited_card_names(hub, tmp_path):
    """The card's order_eval path edited to name a 10-row table elsewhere: 00ef301's load_table checked the shards
    under data/ and then read the table the card named, without an error. Now the card must have the sha256 the
    manifest records, and without a manifest only the folder's own shards are read."""
    elsewhere = tmp_path / "elsewhere" / "test-00000-of-00001.parquet"
    elsewhere.parent.mkdir()
    pq.write_table(pq.read_table(hub / SHARD).slice(0, 10), elsewhere)
    card = (hub / "README.md").read_text()
    pattern = "path: data/order_eval/test-*-of-00001.parquet"
    assert pattern in card
    (hub / "README.md").write_text(card.replace(pattern, f"path: {elsewhere}"))

    with pytest.raises(PublishError) as refused:
        load_table(str(hub), "order_eval", cache_dir=str(tmp_path / "hf"))
    assert str(refused.value).startswith(f"{hub / 'README.md'}: its sha256 differs from the one {MANIFEST} recorded")
    (hub / MANIFEST).unlink()  # a folder without one (a download of the Hub repository): the card names nothing read
    assert load_table(str(hub), "order_eval", cache_dir=str(tmp_path / "hf")).num_rows == 34
