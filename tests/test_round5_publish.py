"""Round 5 (probe5), publish and the readers of a run folder: a recorded shard path is exactly `<table>/<shard>`
inside its run folder and is reached through no link; the held-out views read exactly the shards a report (or a
published manifest) lists, and the table a checkpoint was trained on; the images stage reuses a kept image only when
it came from the row's URL; a spill folder is removed only when it is provably a dead run's."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from pipeline.publish.layout import write_run_folder
from pipeline.run import main
from pipeline.tables.folders import PublishError
from pipeline.tables.load import load_table
from tests.image_fixtures import schema_row


def order_rows(n: int, word: str) -> list[dict]:
    return [schema_row("order_eval", example_id=f"{i:016x}", caption_id=i, caption=f"a {word} number {i}")
            for i in range(n)]


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
