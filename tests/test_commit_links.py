"""Issue 27, links (F8, F9): hardpos never writes or deletes through a symbolic link it did not make. A table or
dead-letter folder that is a link, or a link at the lock file, is refused with one line before any work; links
planted at fixed temporary names are never opened."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline.run import main
from tests.conftest import ARO_SAMPLE, VL_SAMPLE, eval_sets_args, one_error_line, run_cli, visible_files


def args(out: Path, *extra: str) -> list[str]:
    return eval_sets_args(out, VL_SAMPLE, ARO_SAMPLE, "--progress_seconds=0", *extra)


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("folder", ["replace", "rejected"])
def test_f8_a_table_or_dead_letter_folder_that_is_a_link_is_refused_and_its_target_untouched(tmp_path, folder):
    """9d14726 moved the user's files in the link's target into --output_dir (a table folder) or deleted and
    replaced the shards there (rejected/)."""
    out, users = tmp_path / "out", tmp_path / "users_folder"
    assert main(args(out)) == 0
    users.mkdir()
    (users / "notes.txt").write_text("my notes")
    for name in ("test-00000-of-00001.parquet", "replace-00000-of-00001.parquet", "replace-00000-of-00002.parquet"):
        (users / name).write_bytes(b"a file of mine with a shard's name")
    mine = files_of(users)
    shutil.rmtree(out / folder)
    (out / folder).symlink_to(users, target_is_directory=True)
    before = visible_files(out)
    result = run_cli(*args(out))
    assert files_of(users) == mine
    assert (out / folder).is_symlink() and visible_files(out) == before
    assert one_error_line(result) == (
        f"error: --output_dir={out}: {folder} is a symbolic link (to {users}); hardpos writes tables only into "
        f"folders of its own, never through a link: remove the link or choose another --output_dir")
    assert not list(out.glob(".staging-*"))


def test_f9_links_planted_at_the_report_temp_files_are_not_followed(tmp_path):
    """9d14726 wrote report.json and report.md through <name>.tmp, following a link planted there."""
    out = tmp_path / "out"
    assert main(args(out)) == 0
    victims = {name: tmp_path / f"victim_{name}" for name in ("report.json.tmp", "report.md.tmp")}
    for name, victim in victims.items():
        victim.write_text(f"precious {name}")
        (out / name).symlink_to(victim)
    assert main(args(out, "--rows_per_shard=9")) == 0
    assert {name: v.read_text() for name, v in victims.items()} == {n: f"precious {n}" for n in victims}
    assert (out / "report.json").is_file() and not (out / "report.json").is_symlink()


def test_f9_a_link_planted_at_the_lock_file_is_refused_and_its_target_untouched(tmp_path):
    """9d14726 opened .hardpos.lock following a link and wrote its pid and host over the link's target."""
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    assert main(args(out)) == 0
    before = visible_files(out)
    victim.write_text("precious")
    (out / ".hardpos.lock").unlink()
    (out / ".hardpos.lock").symlink_to(victim)
    result = run_cli(*args(out))
    assert victim.read_text() == "precious" and visible_files(out) == before
    assert one_error_line(result) == (f"error: --output_dir={out}: .hardpos.lock there is a symbolic link (to "
                                      f"{victim}), which hardpos did not make and will not write through; remove it")
    # publish locks its folder the same way
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / ".hardpos.lock").symlink_to(victim)
    line = one_error_line(run_cli("--stage=publish", f"--output_dir={out}", f"--publish_dir={tmp_path / 'hub'}"))
    assert ".hardpos.lock there is a symbolic link" in line and victim.read_text() == "precious"
