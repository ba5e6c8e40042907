"""Round 7 (probe7): what load_table checked is what it reads, whatever changes on disk between the check and the
read (Q5-Q7, Q18, Q39: a folder or shard swapped for a link, a shard rewritten, a `current` link switched), no cache
gives rows other than the checked bytes' (Q8, Q9), a config is a plain name (Q10), and publish writes through no link
below the output folder, nor through a `..` that climbs out of one (Q22, Q23)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

import pipeline.tables.load as load
from pipeline.publish.layout import write_run_folder
from pipeline.run import main
from pipeline.tables.folders import MANIFEST, REPORT_FILE, PublishError
from pipeline.tables.load import load_table
from tests.image_fixtures import order_rows, schema_row

SHARD = "data/order_eval/test-00000-of-00001.parquet"
RUN_SHARD = "order_eval/test-00000-of-00001.parquet"


def captions(table) -> set[str]:
    return {caption.split(" number ")[0] for caption in table["caption"]}


@pytest.fixture
def run_folder(tmp_path) -> Path:
    return write_run_folder(tmp_path / "out" / "run", "order_eval", order_rows(3, "own"))


@pytest.fixture
def published(run_folder, capsys) -> Path:
    out = run_folder.parent
    assert main(["--stage=publish", f"--output_dir={out}"]) == 0
    capsys.readouterr()
    return out / "hub"


@pytest.fixture
def victim(tmp_path) -> Path:
    """A folder outside, holding a shard of the same name with other rows (captions 'a victim ...')."""
    folder = write_run_folder(tmp_path / "victim", "order_eval", order_rows(3, "victim"))
    return folder / RUN_SHARD


def between_check_and_read(monkeypatch, change) -> None:
    """`change()` runs after load_table has checked the table and before it reads a byte of it."""
    read_rows = load.read_rows

    def changed_first(*args, **kwargs):
        change()
        return read_rows(*args, **kwargs)
    monkeypatch.setattr(load, "read_rows", changed_first)


def test_the_shards_of_a_checked_table_load_as_before(published, run_folder):
    assert captions(load_table(str(published), "order_eval")) == {"a own"}
    assert captions(load_table(str(run_folder), "order_eval")) == {"a own"}
    table = load_table(str(run_folder), "order_eval")
    assert table.split == "test" and table.num_rows == 3


def test_q5_a_table_folder_swapped_for_a_link_after_the_check_is_refused(published, victim, monkeypatch):
    folder = published / "data" / "order_eval"
    between_check_and_read(monkeypatch, lambda: (folder.rename(published / "old"), folder.symlink_to(victim.parent)))
    with pytest.raises(PublishError, match=f"^{folder}: a symbolic link"):
        load_table(str(published), "order_eval")


def test_q6_a_shard_swapped_for_a_link_after_the_check_is_refused(published, victim, monkeypatch):
    shard = published / SHARD
    between_check_and_read(monkeypatch, lambda: (shard.unlink(), shard.symlink_to(victim)))
    with pytest.raises(PublishError, match=f"^{shard}: a symbolic link"):
        load_table(str(published), "order_eval")


def test_q7_a_run_folder_table_folder_swapped_for_a_link_is_refused(run_folder, victim, monkeypatch):
    folder = run_folder / "order_eval"
    between_check_and_read(monkeypatch, lambda: (folder.rename(run_folder / "old"), folder.symlink_to(victim.parent)))
    with pytest.raises(PublishError, match=f"^{folder}: a symbolic link"):
        load_table(str(run_folder), "order_eval")


def test_q39_a_shard_rewritten_in_place_after_the_check_is_refused(published, victim, monkeypatch):
    shard = published / SHARD
    between_check_and_read(monkeypatch, lambda: shutil.copyfile(victim, shard))
    with pytest.raises(PublishError, match=f"^{shard}: its sha256 differs from the one .*{MANIFEST} recorded"):
        load_table(str(published), "order_eval")


def test_q18_a_current_link_switched_to_another_release_gives_no_other_rows(published, victim, tmp_path, monkeypatch):
    other = tmp_path / "other_release"
    shutil.copytree(published, other)
    shutil.copyfile(victim, other / SHARD)
    manifest = json.loads((other / MANIFEST).read_text())
    manifest["files"][SHARD]["sha256"] = hashlib.sha256(victim.read_bytes()).hexdigest()
    (other / MANIFEST).write_text(json.dumps(manifest))
    assert captions(load_table(str(other), "order_eval")) == {"a victim"}  # a release that checks on its own
    current = tmp_path / "current"
    current.symlink_to(published)
    between_check_and_read(monkeypatch, lambda: (current.unlink(), current.symlink_to(other)))
    # The check read the first release's manifest: the second's bytes do not pass as its rows.
    with pytest.raises(PublishError, match="its sha256 differs"):
        load.load_checked(str(current), "order_eval")


@pytest.mark.parametrize("where", ["published", "run"])
def test_q8_q9_new_bytes_with_the_old_mtime_give_the_new_rows_not_a_cached_copy(where, published, run_folder, victim):
    folder, shard, record = (published, SHARD, MANIFEST) if where == "published" else \
        (run_folder, RUN_SHARD, REPORT_FILE)
    assert captions(load_table(str(folder), "order_eval")) == {"a own"}
    stat = os.stat(folder / shard)
    shutil.copyfile(victim, folder / shard)
    os.utime(folder / shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as cp -p or rsync -t keep it
    recorded = json.loads((folder / record).read_text())
    sha256s = recorded["files"][shard] if where == "published" else recorded["tables"]["order_eval"]["sha256"]
    new = hashlib.sha256(victim.read_bytes()).hexdigest()
    if where == "published":
        sha256s["sha256"] = new
    else:
        sha256s[shard] = new
    (folder / record).write_text(json.dumps(recorded))
    assert captions(load_table(str(folder), "order_eval")) == {"a victim"}


@pytest.mark.parametrize("config", ["../../victim/order_eval", "order_eval/", "a/b", ".", "", "order_eval\n"])
@pytest.mark.parametrize("manifest", [True, False])
def test_q10_a_config_that_is_not_a_plain_name_is_refused(published, config, manifest):
    if not manifest:
        (published / MANIFEST).unlink()
    with pytest.raises(PublishError, match=r"is not a config name"):
        load_table(str(published), config)


def test_the_evaluator_reads_a_finetune_table_from_its_checked_bytes(tmp_path, monkeypatch):
    """replace_views reads the train table it checked through the same reader (no link, sha256 as read)."""
    from pipeline.train import replace_views

    rows = [schema_row("train", example_id=f"{i:016x}", caption_id=i, caption="a dog sitting on a bench",
                       hard_positive="a dog seated on a bench") for i in range(2)]
    run = write_run_folder(tmp_path / "ft", "train", rows)
    refs, table = replace_views.train_table(str(run))
    assert replace_views.table_substitutions(refs) == frozenset({("sitting", "seated")})
    shard = table.shards[0]
    other = write_run_folder(tmp_path / "other", "train", [dict(rows[0], hard_positive="a dog lying on a bench")])
    shutil.copyfile(next((other / "train").glob("*.parquet")), shard)  # rewritten after the check
    replace_views.table_substitutions.cache_clear()
    with pytest.raises(PublishError, match="its sha256 differs"):
        replace_views.table_substitutions(refs)


def _planted(out: Path, victim: Path, name: str) -> None:
    victim.mkdir(parents=True, exist_ok=True)
    (out / name).symlink_to(victim)


def test_q22_publish_refuses_a_dotdot_that_climbs_out_of_a_link(run_folder, tmp_path, capsys):
    out = run_folder.parent
    _planted(out, tmp_path / "vic" / "deep", "x")
    assert main(["--stage=publish", f"--output_dir={out}", f"--publish_dir={out}/x/../hub2"]) == 2
    err = capsys.readouterr().err
    assert "its '..' climbs out of a symbolic link" in err and "Traceback" not in err
    assert not (tmp_path / "vic" / "hub2").exists() and not (out / "hub2").exists()


def test_q23_publish_refuses_a_link_above_the_publish_folder_in_the_output_folder(run_folder, tmp_path, capsys):
    out = run_folder.parent
    _planted(out, tmp_path / "vic", "sub")
    assert main(["--stage=publish", f"--output_dir={out}", f"--publish_dir={out}/sub/hub"]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'sub'} is a symbolic link" in err and "Traceback" not in err
    assert list((tmp_path / "vic").iterdir()) == []


def test_a_dotdot_without_a_link_and_a_publish_folder_elsewhere_still_publish(run_folder, tmp_path, capsys):
    out = run_folder.parent
    (out / "plain").mkdir()
    assert main(["--stage=publish", f"--output_dir={out}", f"--publish_dir={out}/plain/../hub3"]) == 0
    assert main(["--stage=publish", f"--output_dir={out}", f"--publish_dir={tmp_path / 'elsewhere'}"]) == 0
    capsys.readouterr()
    assert captions(load_table(str(out / "hub3"), "order_eval")) == captions(
        load_table(str(tmp_path / "elsewhere"), "order_eval")) == {"a own"}
