"""Round 5 (probe5), publish and the readers of a run folder: a recorded shard path is exactly `<table>/<shard>`
inside its run folder and is reached through no link; the held-out views read exactly the shards a report (or a
published manifest) lists, and the table a checkpoint was trained on; the images stage reuses a kept image only when
it came from the row's URL; a spill folder is removed only when it is provably a dead run's."""
from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pytest

from pipeline.publish.layout import write_run_folder
from pipeline.run import main
from pipeline.tables.folders import PublishError
from pipeline.tables.load import load_table
from tests.image_fixtures import order_rows, schema_row


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.fixture
def secret(tmp_path) -> Path:
    """Another project's complete run folder, outside every --output_dir of these tests."""
    return write_run_folder(tmp_path / "secret", "order_eval", order_rows(3, "SECRET"))


def _point_at(run: Path, relative: str, secret: Path) -> None:
    """run's report.json records its table as the shard `relative` (with the secret shard's sha256 and rows), and
    run's own table folder is gone."""
    shard = next((secret / "order_eval").glob("*.parquet"))
    report = json.loads((run / "report.json").read_text())
    section = report["tables"]["order_eval"]
    section["shards"] = {relative: 3}
    section["sha256"] = {relative: hashlib.sha256(shard.read_bytes()).hexdigest()}
    section.update(read=3, rows=3, written=3)
    (run / "report.json").write_text(json.dumps(report))
    for own in (run / "order_eval").iterdir():
        own.unlink()
    (run / "order_eval").rmdir()


def _refused(out: Path, capsys, expected: str) -> None:
    """publish of out: one line, exit 2, no Hub folder; load_table of out/run: the same refusal, no traceback."""
    assert main(["--stage=publish", f"--output_dir={out}"]) == 2
    lines = error_lines(capsys)
    assert len(lines) == 1 and expected in lines[0], lines
    assert not (out / "hub").exists()
    with pytest.raises(PublishError, match=expected.split(" (")[0][:40]):
        load_table(str(out / "run"), "order_eval")


def test_m17_a_report_naming_a_shard_outside_its_run_folder_is_refused(tmp_path, secret, capsys):
    """report.json lists its shard as ../../secret/order_eval/<shard> (with that file's sha256): cd18f06
    hard-linked the outside file into the Hub folder, exit 0, and load_table returned its rows."""
    out = tmp_path / "dotdot"
    run = write_run_folder(out / "run", "order_eval", order_rows(2, "cat"))
    shard = next((secret / "order_eval").glob("*.parquet"))
    relative = f"../../secret/order_eval/{shard.name}"
    assert (run / relative).resolve() == shard.resolve()
    _point_at(run, relative, secret)
    _refused(out, capsys, f"{run}/report.json: table order_eval lists the shard {relative!r}, not <table folder>/")
    assert os.stat(shard).st_nlink == 1  # never hard-linked anywhere


def test_m18_an_absolute_shard_path_is_one_line_not_a_traceback(tmp_path, secret, capsys):
    """The same shard listed by absolute path: a ValueError traceback from relative_to (publish and load_table)."""
    out = tmp_path / "abs"
    run = write_run_folder(out / "run", "order_eval", order_rows(2, "cat"))
    shard = next((secret / "order_eval").glob("*.parquet"))
    _point_at(run, str(shard), secret)
    _refused(out, capsys, f"{run}/report.json: table order_eval lists the shard {str(shard)!r}, not <table folder>/")
    assert os.stat(shard).st_nlink == 1


def test_m19_a_run_folder_that_is_a_link_to_an_outside_folder_is_refused(tmp_path, secret, capsys):
    """--output_dir holds run -> secret (a complete run folder elsewhere): it was published, its shards hard-linked
    into the Hub folder."""
    out = tmp_path / "linkrun"
    out.mkdir()
    (out / "run").symlink_to(secret)
    write_run_folder(out / "mine", "order_eval", order_rows(2, "cat"))  # a real run beside it changes nothing
    assert main(["--stage=publish", f"--output_dir={out}"]) == 2
    assert error_lines(capsys) == [f"error: {out / 'run'}: a symbolic link to a run folder (to {secret}), which "
                                   f"hardpos never reads a table through or publishes; put the file itself there, "
                                   f"or run the stage again"]
    assert not (out / "hub").exists()
    shard = next((secret / "order_eval").glob("*.parquet"))
    assert os.stat(shard).st_nlink == 1


@pytest.mark.parametrize("where", ["between", "report"])
def test_m20_a_link_between_the_run_folder_and_the_table_folder_is_refused(tmp_path, secret, capsys, where):
    """between: the report lists sub/order_eval/<shard>, and run/sub is a link to the outside run folder (the table
    folder itself real): published, as the link check looked at the table folder and the shards only. report: the
    run folder's report.json is itself a link to another run's."""
    out = tmp_path / "linkmid"
    run = write_run_folder(out / "run", "order_eval", order_rows(2, "cat"))
    shard = next((secret / "order_eval").glob("*.parquet"))
    if where == "between":
        (run / "sub").symlink_to(secret)
        relative = f"sub/order_eval/{shard.name}"
        _point_at(run, relative, secret)
        assert main(["--stage=publish", f"--output_dir={out}"]) == 2
        lines = error_lines(capsys)
        assert len(lines) == 1 and f"lists the shard {relative!r}, not <table folder>/" in lines[0], lines
    else:
        (run / "report.json").unlink()
        (run / "report.json").symlink_to(secret / "report.json")
        assert main(["--stage=publish", f"--output_dir={out}"]) == 2
        assert error_lines(capsys) == [f"error: {run / 'report.json'}: a symbolic link (to {secret / 'report.json'}), "
                                       f"which hardpos never reads a table through or publishes; put the file "
                                       f"itself there, or run the stage again"]
    assert not (out / "hub").exists()
    assert os.stat(shard).st_nlink == 1


def test_m17_m20_a_plain_run_folder_still_publishes_and_loads(tmp_path, capsys):
    """The checks refuse only paths and links a stage never writes: a run folder as written publishes, and a link
    elsewhere in --output_dir (a user's images folder) is left alone."""
    out = tmp_path / "ok"
    write_run_folder(out / "run", "order_eval", order_rows(2, "cat"))
    (tmp_path / "pictures").mkdir()
    (out / "images").symlink_to(tmp_path / "pictures")
    assert main(["--stage=publish", f"--output_dir={out}"]) == 0
    assert sorted(p.relative_to(out / "hub").as_posix() for p in (out / "hub" / "data").rglob("*.parquet")) == \
        ["data/order_eval/test-00000-of-00001.parquet"]
    assert load_table(str(out / "run"), "order_eval").num_rows == 2


# ------------------------------------------------------------------------------------------- held-out views

# (caption, hard_positive, positive_type): sits -> is seated reaches REPLACE's sitting -> seated
FINETUNE = [("a cat sits on a chair", "a cat is seated on a chair", "replace"),
            ("a ball beneath a table", "a ball under a table", "replace")]
OTHER = [("a man riding a horse", "a man on a horse", "swap")]  # reaches no REPLACE entry
STRAY = [("a large dog on a bed", "a big dog on a bed", "replace")]  # large -> big
REPLACE_ROWS = [{"replaced_from": f, "replaced_to": t} for f, t in
                [("sitting", "seated"), ("under", "beneath"), ("large", "big"), ("red", "blue")]]


def train_row(k: int, caption: str, positive: str, positive_type: str) -> dict:
    return schema_row("train", example_id=f"ft{k:03d}", caption_id=500 + k, image_id=k, key=str(500 + k),
                      file_name=f"{k:012d}.jpg", caption=caption, hard_positive=positive, positive_type=positive_type,
                      hard_negative=f"not {caption}", negative_type="replace")


def train_run(folder: Path, rows) -> Path:
    return write_run_folder(folder, "train", [train_row(k, *row) for k, row in enumerate(rows)])


def fingerprint_of(run: Path) -> str:
    """A table's fingerprint as the trainer records it: the sha256 of its shards' recorded sha256s, sorted."""
    recorded = json.loads((run / "report.json").read_text())["tables"]["train"]["sha256"].values()
    return hashlib.sha256("\n".join(sorted(recorded)).encode("ascii")).hexdigest()


def left_out(view) -> list[str]:
    return [f"{r['replaced_from']} -> {r['replaced_to']}" for r in REPLACE_ROWS if not view.keep(r)]


def test_m14_held_out_from_a_checkpoint_refuses_a_train_table_other_than_the_one_trained_on(tmp_path):
    """The checkpoint recorded only args['data'], a path: with another table put there, held_out was computed from
    it (38 of 38 rows, 'left out: none'), looking complete. The checkpoint now records the table's fingerprint, and
    held_out is computed only from the table it names."""
    import torch

    from pipeline.train import finetune, replace_views

    run = train_run(tmp_path / "ftrun", FINETUNE)
    record = {"data": str(run), "fingerprint": fingerprint_of(run), "shards": 1}
    args = {"data": str(run), "positive_types": "all", "negative_types": "all"}
    final = tmp_path / "final.pt"
    torch.save({"model": {}, "args": args, "train_table": record}, final)
    view = replace_views.held_out(None, None, str(final))
    assert left_out(view) == ["sitting -> seated", "under -> beneath"]

    (tmp_path / "ftrun").rename(tmp_path / "ftrun_orig")  # another run's train table where it was
    train_run(tmp_path / "ftrun", OTHER)
    view = replace_views.held_out(None, None, str(final))
    assert view.keep is None
    assert view.info["reason"].startswith(f"{run} is not the train table checkpoint {final} was trained on")
    # a checkpoint that records no fingerprint (written before hardpos recorded one) cannot be checked either
    torch.save({"model": {}, "args": args}, tmp_path / "old.pt")
    view = replace_views.held_out(None, None, str(tmp_path / "old.pt"))
    assert view.keep is None and "records no fingerprint of its train table" in view.info["reason"]
    # --finetune_table is still taken as given
    assert left_out(replace_views.held_out(str(tmp_path / "ftrun_orig"), None, str(final))) == \
        ["sitting -> seated", "under -> beneath"]
    # what the trainer records
    from pipeline.train.data import load_rows

    *_, checked = load_rows(str(tmp_path / "ftrun_orig"), None, None)
    assert finetune.train_table_record(str(tmp_path / "ftrun_orig"), checked) == \
        {**record, "data": str(tmp_path / "ftrun_orig")}


def test_m14_the_trainer_records_the_train_tables_fingerprint_in_its_checkpoints(tmp_path, capsys):
    """A finetune run's final.pt and step checkpoints hold {data, fingerprint, shards} of the table it read; a
    --resume on another table at the same path is refused."""
    import shutil

    import torch

    from pipeline.train import finetune
    from tests.train_fixtures import N_ROWS, make_train_data, run_args
    from tests.train_fixtures import train_row as fixture_row

    data = make_train_data(tmp_path / "data")
    out = tmp_path / "out"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert finetune.main(run_args(data, out, "--max_steps=1", "--epochs=2")) == 0
        expected = {"data": str(data.data), "fingerprint": fingerprint_of(data.data), "shards": 1}
        for path in (out / "final.pt", out / "checkpoints" / "latest.pt"):
            assert torch.load(path, map_location="cpu", weights_only=True)["train_table"] == expected
        # the table rewritten with one caption changed: as many rows, another table
        rows = [fixture_row(i) for i in range(N_ROWS)]
        rows[0]["caption"] = "a changed caption"
        shutil.rmtree(data.data)
        write_run_folder(data.data, "train", rows)
        capsys.readouterr()
        assert finetune.main(run_args(data, out, "--max_steps=2", "--epochs=2", "--resume=latest")) == 2
        assert f"--data: {data.data} is not the train table the checkpoint was trained on" in capsys.readouterr().err
    finally:
        torch.set_num_threads(threads)


def test_m15_a_stray_shard_beside_the_finetune_table_is_refused_as_load_table_refuses_it(tmp_path):
    """A Parquet file in the run's train/ that report.json does not list widened held_out (its large -> big left
    out too), while load_table refused the folder. The held-out views now read exactly the shards the report lists,
    checked as load_table checks them, however the table is named."""
    import pyarrow.parquet as pq

    from pipeline.train import replace_views

    run = train_run(tmp_path / "ftrun", FINETUNE)
    shard = next((run / "train").glob("*.parquet"))
    stray = train_run(tmp_path / "other", STRAY) / "train" / shard.name
    (run / "train" / f"{shard.name}.old.parquet").write_bytes(stray.read_bytes())
    assert len(pq.read_table(run / "train" / f"{shard.name}.old.parquet")) == 1
    with pytest.raises(PublishError, match="not in the report"):
        load_table(str(run), "train")
    for named in (run, run / "train", run / "train" / "*.parquet"):
        with pytest.raises(replace_views.UsageError, match=r"^--finetune_table: .*not in the report"):
            replace_views.held_out(str(named), None, None)
    # and a listed shard named alone by a glob still checks against its report
    (run / "train" / f"{shard.name}.old.parquet").unlink()
    assert left_out(replace_views.held_out(str(run / "train" / "*.parquet"), None, None)) == \
        ["sitting -> seated", "under -> beneath"]


def test_m16_a_published_finetune_table_is_checked_against_its_manifest(tmp_path, capsys):
    """--finetune_table=<published folder> whose data/train shard was replaced by another valid train shard: held_out
    was built from it ('left out: none'), as the check looked for report.json two levels up only; load_table
    refused the same folder. Now it is checked against the manifest, however it is named."""
    from pipeline.train import replace_views

    out = tmp_path / "pubsrc"
    train_run(out / "run", FINETUNE)
    assert main(["--stage=publish", f"--output_dir={out}"]) == 0
    hub = out / "hub"
    assert left_out(replace_views.held_out(str(hub), None, None)) == ["sitting -> seated", "under -> beneath"]
    published = next((hub / "data" / "train").glob("*.parquet"))
    other = train_run(tmp_path / "other", OTHER) / "train" / published.name
    published.unlink()  # a hard link to the run's shard: replaced, not written through
    published.write_bytes(other.read_bytes())
    with pytest.raises(PublishError, match="sha256 differs"):
        load_table(str(hub), "train")
    for named in (hub, hub / "data" / "train", hub / "data" / "train" / "*.parquet"):
        with pytest.raises(replace_views.UsageError, match=r"^--finetune_table: .*its sha256 differs from the one "):
            replace_views.held_out(str(named), None, None)


# ------------------------------------------------------------------------------------------------ spill folders

def test_m37_only_provable_spill_folders_of_dead_runs_are_removed(tmp_path):
    """A user's hardpos-spill-mydata.removing/ (no lock file) in --spill_dir was deleted with its notes by the
    next run's make_folder: the '.removing' branch of remove_stale removed any such folder unchecked. Now only a
    folder with a name spill gives, holding the lock file, whose lock is free, is removed; a removal cut short is
    still finished (its lock file is removed last)."""
    from pipeline.io import spill

    parent = tmp_path / "spill"
    users = {name: parent / name for name in ("hardpos-spill-mydata.removing", "hardpos-spill-other",
                                               "hardpos-spill-all-0123456789ab.removing")}  # ours by name only
    for folder in users.values():
        folder.mkdir(parents=True)
        (folder / "notes.txt").write_text("precious")
    dead = parent / "hardpos-spill-train_negatives-00112233aabb"  # a killed run's: lock file, lock free
    cut_short = parent / "hardpos-spill-all-aabbccddeeff.removing"  # a removal that stopped half way
    for folder in (dead, cut_short):
        (folder / "part-0").mkdir(parents=True)
        (folder / "part-0" / "x.pkl").write_bytes(b"spilled")
        (folder / spill.MARK).write_bytes(b"")
    linked = parent / "hardpos-spill-all-ffeeddccbbaa"  # a lock file that is a link is no proof either
    linked.mkdir()
    (linked / spill.MARK).symlink_to(dead / spill.MARK)
    live = spill.make_folder(str(parent), "train_set")  # this run's own: its lock is held
    try:
        assert sorted(spill.remove_stale(str(parent))) == []  # the first call (make_folder's) removed them
        assert not dead.exists() and not cut_short.exists()
        for folder in users.values():
            assert (folder / "notes.txt").read_text() == "precious"
        assert linked.is_dir() and Path(live).is_dir()
    finally:
        spill.remove_folder(live)
    assert not Path(live).exists() and not Path(f"{live}.removing").exists()


# ------------------------------------------------------------------------------------------------ images stage

def _solid_jpeg(colour: tuple[int, int, int]) -> bytes:
    from PIL import Image

    data = io.BytesIO()
    Image.new("RGB", (40, 32), colour).save(data, "JPEG", quality=95)
    return data.getvalue()


def _colours(images_dir: Path, example_ids) -> dict[str, str]:
    from pipeline.publish.images import open_images

    found = open_images(str(images_dir))
    colours = {}
    for example_id in example_ids:
        red, green, blue = found[example_id].image.convert("RGB").getpixel((8, 8))
        colours[example_id] = max((red, "red"), (green, "green"), (blue, "blue"))[1]
    return colours


def test_m34_an_image_kept_from_another_url_or_changed_since_is_fetched_again(tmp_path, capsys):
    """--stage=images, then the table rebuilt from a new corpus whose image ids are the same and whose urls are not
    (/a/ red pictures -> /b/ blue ones), then --stage=images again in the same folder: '0 fetched now, 6 already
    there', every row given the earlier corpus's red picture. A kept image is now given to a row only when it was
    fetched from the url the row names and its stored bytes are the ones recorded when it was stored."""
    import tarfile

    import pyarrow.parquet as pq

    from tests.image_fixtures import ImageServer, write_table

    files = {**{f"a/{n}.jpg": _solid_jpeg((220, 20, 20)) for n in (1, 2)},
             **{f"b/{n}.jpg": _solid_jpeg((20, 20, 220)) for n in (1, 2)}}
    out = tmp_path / "out"
    stage = ["--stage=images", f"--output_dir={out}", "--image_processes=1", "--image_threads=2",
             "--image_timeout=5"]
    with ImageServer(files) as server:
        def corpus(side: str) -> None:
            write_table(out, "train_negatives", "train_negatives", [
                schema_row("train_negatives", example_id=f"cap-{n}", image_id=n, image_url=f"{server.url}/{side}/{n}.jpg")
                for n in (1, 2)])

        corpus("a")
        assert main(stage) == 0
        assert _colours(out / "images", ["cap-1", "cap-2"]) == {"cap-1": "red", "cap-2": "red"}
        corpus("b")  # the same image ids, other urls
        before = server.snapshot()
        assert main(stage) == 0
        assert server.snapshot() - before == {"b/1.jpg": 1, "b/2.jpg": 1}
        assert _colours(out / "images", ["cap-1", "cap-2"]) == {"cap-1": "blue", "cap-2": "blue"}
        index = pq.read_table(out / "images" / "index" / "train_negatives.parquet").to_pylist()
        assert {r["url"] for r in index} == {f"{server.url}/b/{n}.jpg" for n in (1, 2)}

        # the stored bytes of cap-1's image changed (another valid picture): not reused, fetched again
        row = next(r for r in index if r["example_id"] == "cap-1")
        shard = out / "images" / row["shard"]
        rewritten = tmp_path / "rewritten.tar"
        green = _solid_jpeg((20, 220, 20))
        with tarfile.open(shard) as src, tarfile.open(rewritten, "w") as dst:
            for member in src:
                data = green if member.name == f"{row['key']}.jpg" else src.extractfile(member).read()
                member.size = len(data)
                dst.addfile(member, io.BytesIO(data))
        shard.write_bytes(rewritten.read_bytes())
        assert _colours(out / "images", ["cap-1"]) == {"cap-1": "green"}
        before = server.snapshot()
        assert main(stage) == 0
        assert server.snapshot() - before == {"b/1.jpg": 1}
        assert _colours(out / "images", ["cap-1", "cap-2"]) == {"cap-1": "blue", "cap-2": "blue"}
        before = server.snapshot()
        assert main(stage) == 0  # and then reused
        assert server.snapshot() == before
        assert _colours(out / "images", ["cap-1", "cap-2"]) == {"cap-1": "blue", "cap-2": "blue"}
