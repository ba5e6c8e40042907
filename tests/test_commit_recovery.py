"""Issue 27, the commit and its recovery (F4, F5, F18): a commit cut short at any of its renames is finished by the
next run with nothing lost; a commit record that cannot be read is set aside with one line; recovery deletes only
staging folders hardpos made."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest

from pipeline.io.commit import FolderLock, new_staging, recover
from pipeline.run import main
from pipeline.tables.folders import find_tables
from tests.conftest import ARO_SAMPLE, REPO, VL_SAMPLE, eval_sets_args, run_cli, visible_files


def args(out: Path, *extra: str) -> list[str]:
    return eval_sets_args(out, VL_SAMPLE, ARO_SAMPLE, "--progress_seconds=0", *extra)


class Killed(BaseException):
    """The process died here: nothing after it runs (a BaseException, so that no `except Exception` goes on)."""


@contextmanager
def renames_die_from(folder: Path, at: int | None):
    """os.rename and os.replace of paths under folder, counted (the list yielded); from the at-th on (1-based)
    each raises Killed instead of renaming: a process SIGKILLed just before that rename."""
    calls, real = [], {"rename": os.rename, "replace": os.replace}

    def dying(name):
        def call(src, dst, *args, **kwargs):
            if str(src).startswith(str(folder)) or str(dst).startswith(str(folder)):
                calls.append((name, str(src), str(dst)))
                if at is not None and len(calls) >= at:
                    raise Killed(f"killed before {name}({src}, {dst})")
            return real[name](src, dst, *args, **kwargs)
        return call

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "rename", dying("rename"))
        patch.setattr(os, "replace", dying("replace"))
        yield calls


def recover_dying_at(out: Path, at: int | None) -> bool:
    """The next run's recovery, dying at its at-th rename; whether it died."""
    try:
        with renames_die_from(out, at), FolderLock(str(out), "eval_sets"):
            recover(str(out))
    except Killed:
        return True
    return False


def test_f4_a_commit_killed_at_any_rename_is_finished_by_recovery_with_nothing_lost(tmp_path):
    """An eval_sets rerun into a complete folder, with smaller shards (other shard and dead-letter names), killed
    before each rename its commit makes in turn; the recovery of the next run is killed once more at its first
    rename, then runs. The folder must hold the earlier result or the rerun's, whole, every time: 9d14726's
    recovery deleted the dead-letter shards the killed commit had already moved (report.json still listing them)."""
    earlier, out = tmp_path / "earlier", tmp_path / "out"
    assert main(args(earlier)) == 0
    shutil.copytree(earlier, out)
    before = visible_files(out)
    with renames_die_from(out, None) as renames:
        assert main(args(out, "--rows_per_shard=7")) == 0
    after = visible_files(out)
    assert after != before and len(renames) >= 10  # shard names differ: stale shards are deleted, new ones placed
    outcomes = []
    for at in range(1, len(renames) + 1):
        shutil.rmtree(out)
        shutil.copytree(earlier, out)
        with pytest.raises(Killed), renames_die_from(out, at):
            main(args(out, "--rows_per_shard=7"))
        recover_dying_at(out, 1)
        recover_dying_at(out, None)
        found = visible_files(out)
        outcomes.append("earlier" if found == before else "rerun" if found == after else "LOST OR MIXED")
        assert not list(out.glob(".staging-*"))
    assert "LOST OR MIXED" not in outcomes, [(at + 1, renames[at], o) for at, o in enumerate(outcomes)]
    assert outcomes[-1] == "rerun"  # killed at the last rename: the commit had begun and was finished


# The CLI, SIGKILLed just before its n-th rename under the folder: python KILLED_AT_A_RENAME N FOLDER [flags].
KILLED_AT_A_RENAME = textwrap.dedent("""
    import os, runpy, signal, sys
    at, folder = int(sys.argv.pop(1)), sys.argv.pop(1)
    real, seen = {"rename": os.rename, "replace": os.replace}, []
    def dying(name):
        def call(src, dst, *args, **kwargs):
            if str(src).startswith(folder) or str(dst).startswith(folder):
                seen.append(dst)
                if len(seen) == at:
                    os.kill(os.getpid(), signal.SIGKILL)
            return real[name](src, dst, *args, **kwargs)
        return call
    os.rename, os.replace = dying("rename"), dying("replace")
    sys.argv = ["pipeline.run", *sys.argv[1:]]
    runpy.run_module("pipeline.run", run_name="__main__", alter_sys=True)
""")


@pytest.mark.parametrize("at", [4, 6])
def test_f4_an_eval_sets_rerun_sigkilled_in_its_commit_checks_out_after_the_next_run(tmp_path, at):
    """The issue's reproduction, end to end: SIGKILL at a rename of an eval_sets rerun's commit, the next run (of
    another stage) into the folder, then pipeline.checks.eval_sets and publish's verification. On 9d14726 the
    next run's recovery deleted the dead-letter shards already moved, which report.json still listed."""
    out = tmp_path / "out"
    assert main(args(out)) == 0
    (tmp_path / "killed_at_a_rename.py").write_text(KILLED_AT_A_RENAME)
    killed = subprocess.run([sys.executable, str(tmp_path / "killed_at_a_rename.py"), str(at), str(out),
                             *args(out, "--rows_per_shard=7")], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    assert list(out.glob(".staging-*/commit.json"))  # it died inside its commit
    captions = REPO / "samples" / "coco" / "captions_sample.json"
    next_run = run_cli("--stage=order_eval", f"--coco_captions={captions}", f"--output_dir={out}",
                       "--progress_seconds=0")
    assert next_run.returncode == 0, next_run.stderr
    assert next_run.stderr.splitlines() == [f"finished the interrupted commit of --stage=eval_sets in {out}"]
    checks = run_cli(str(out), f"--vl_checklist_root={VL_SAMPLE}", module="pipeline.checks.eval_sets")
    assert checks.returncode == 0, checks.stdout
    assert {t.config for t in find_tables(out)} == {"replace_eval", "swap_eval", "order_eval"}  # sha256 verified


def _damaged_records() -> dict[str, bytes]:
    escaping = {"stage": "eval_sets", "tables": {"../../victim": {}}}  # a record of either format
    return {"empty": b"", "cut short": b'{"reports": [{"stage": "eval_sets", "tab',
            "escaping the folder": json.dumps({**escaping, "reports": [escaping], "files": ["../../x"]}).encode()}


@pytest.mark.parametrize("damage", list(_damaged_records()))
def test_f5_a_damaged_commit_record_is_set_aside_with_one_line_and_the_run_goes_on(tmp_path, damage):
    """A .staging-*/commit.json that a full disk left empty (or cut short, or naming paths outside the folder):
    9d14726 crashed in commit.recover with JSONDecodeError on every later run, and publish said to run a stage."""
    out = tmp_path / "out"
    assert main(args(out)) == 0
    before = visible_files(out)
    staging = Path(new_staging(str(out), "eval_sets"))
    (staging / "replace").mkdir()
    (staging / "replace" / "test-00000-of-00001.parquet").write_bytes(b"a shard of the run that died")
    (staging / "commit.json").write_bytes(_damaged_records()[damage])
    result = run_cli(*args(out))
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    aside = out / f".damaged-{staging.name[1:]}"
    assert line.startswith(f"{staging}: its commit record commit.json is damaged (")
    assert line.endswith(f"so its commit cannot be finished; set aside as {aside}: look at it, then delete it")
    assert (aside / "commit.json").read_bytes() == _damaged_records()[damage]  # kept as it was, to look at
    assert visible_files(out) == before
    assert not list(out.glob(".staging-*"))
    assert {t.config for t in find_tables(out)} == {"replace_eval", "swap_eval"}  # publish finds nothing unfinished
    assert run_cli(*args(out)).stderr == ""  # set aside once: not a line on every run


def test_f18_a_folder_of_the_users_named_like_a_staging_folder_is_never_deleted(tmp_path, sample_output):
    """--publish_dir=A/.staging-mine, then a stage run into A: 9d14726's recovery deleted every .staging-* folder."""
    a = tmp_path / "A"
    assert main(args(a)) == 0
    mine = a / ".staging-mine"
    assert main(["--stage=publish", f"--output_dir={sample_output}", f"--publish_dir={mine}"]) == 0
    published = {p.relative_to(mine): p.read_bytes() for p in mine.rglob("*") if p.is_file()}
    assert Path("README.md") in published and len(published) >= 4
    left = Path(new_staging(str(a), "eval_sets"))  # and one a killed run left: that one goes
    assert main(args(a)) == 0
    assert {p.relative_to(mine): p.read_bytes() for p in mine.rglob("*") if p.is_file()} == published
    assert not left.exists()
