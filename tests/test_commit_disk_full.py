"""Issue 27, a full disk (F5, F6): on a small tmpfs of its own (a private mount namespace), a run that finds the disk
full while it writes its shards or its commit record ends with one line and a non-zero exit, commits nothing, and
the next run goes on as if it had not happened."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ARO_SAMPLE, REPO, VL_SAMPLE, visible_files

PRIVATE_MOUNTS = ["unshare", "--user", "--map-root-user", "--mount"]

# Fills the disk that holds sys.argv[1], then frees sys.argv[2] bytes of it.
FILL = textwrap.dedent("""
    import os, sys
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
    written = 0
    while True:
        try:
            written += os.write(fd, bytes(1 << 16))
        except OSError:
            break
    os.ftruncate(fd, max(0, written - int(sys.argv[2])))
    os.close(fd)
""")


def _private_tmpfs_works() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run([*PRIVATE_MOUNTS, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not _private_tmpfs_works(),
                                reason="needs unshare --user --mount (unprivileged user namespaces) and tmpfs")


def on_small_disk(tmp_path: Path, script: str) -> subprocess.CompletedProcess:
    """Runs the bash script with $DISK a fresh 4 MB tmpfs that only it sees, $RUN the CLI (eval_sets on the
    samples into $DISK/out, more flags after it), $FILL the filler; $T is tmp_path, outside the tmpfs."""
    disk = tmp_path / "disk"
    disk.mkdir()
    (tmp_path / "fill.py").write_text(FILL)
    run = (f"{sys.executable} -m pipeline.run --stage=eval_sets --output_dir={disk}/out "
           f"--vl_checklist_root={VL_SAMPLE} --aro_vga={ARO_SAMPLE} --progress_seconds=0")
    env = f"export DISK={disk} T={tmp_path} FILL='{sys.executable} {tmp_path}/fill.py' RUN='{run}' PYTHONPATH={REPO}"
    return subprocess.run([*PRIVATE_MOUNTS, "bash", "-euc", f"{env}; mount -t tmpfs -o size=4m tmpfs $DISK; {script}"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def stderr_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]


def test_f6_a_disk_full_while_the_shards_are_written_ends_with_one_line_and_commits_nothing(tmp_path):
    """9d14726 printed a 112-line Beam traceback."""
    done = on_small_disk(tmp_path, """
        $RUN > /dev/null
        cp -a $DISK/out $T/before
        $FILL $DISK/filler 16384
        set +e; $RUN --rows_per_shard=7 > /dev/null 2> $T/full.err; echo $? > $T/full.rc; set -e
        cp -a $DISK/out $T/after
    """)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "full.rc").read_text().strip() == "1"
    [line] = stderr_lines(tmp_path / "full.err")
    assert line.startswith("error: No space left on device [while running 'Write")
    assert line.endswith(f"]; nothing was written to {tmp_path}/disk/out, its earlier contents stay")
    assert visible_files(tmp_path / "after") == visible_files(tmp_path / "before")
    assert not list((tmp_path / "after").glob(".staging-*"))


# The CLI, with the disk filling up at the moment the pipeline is done (as it reads back its staging report)
# and the commit is about to begin.
FULL_AT_THE_COMMIT = textwrap.dedent("""
    import os, runpy, subprocess, sys
    import pipeline.io.report as report
    real = report.read_json
    def read_json(path):
        if os.path.basename(os.path.dirname(path)).startswith(".staging-") and path.endswith("/report.json"):
            subprocess.run([*os.environ["FILL"].split(), os.environ["DISK"] + "/filler", "0"], check=True)
        return real(path)
    report.read_json = read_json
    sys.argv = ["pipeline.run", *sys.argv[1:]]
    runpy.run_module("pipeline.run", run_name="__main__", alter_sys=True)
""")


def test_f5_a_disk_full_as_the_commit_record_is_written_commits_nothing_and_the_next_run_goes_on(tmp_path):
    """9d14726 left a damaged .staging-*/commit.json (written in place), then crashed on it in every later run."""
    (tmp_path / "full_at_commit.py").write_text(FULL_AT_THE_COMMIT)
    done = on_small_disk(tmp_path, f"""
        $RUN > /dev/null
        cp -a $DISK/out $T/before
        set +e
        {sys.executable} $T/full_at_commit.py ${{RUN#* -m pipeline.run }} --rows_per_shard=7 > /dev/null 2> $T/full.err
        echo $? > $T/full.rc
        cp -a $DISK/out $T/after_full
        rm $DISK/filler
        $RUN > /dev/null 2> $T/next.err; echo $? > $T/next.rc
        cp -a $DISK/out $T/after_next
    """)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "full.rc").read_text().strip() == "1"
    [line] = stderr_lines(tmp_path / "full.err")
    out = tmp_path / "disk" / "out"
    assert re.fullmatch(f"error: No space left on device: {out}/.staging-eval_sets-[0-9a-f]+/commit.json; "
                        f"nothing was written to {out}, its earlier contents stay", line), line
    assert visible_files(tmp_path / "after_full") == visible_files(tmp_path / "before")
    assert not list((tmp_path / "after_full").glob(".staging-*"))
    assert (tmp_path / "next.rc").read_text().strip() == "0", (tmp_path / "next.err").read_text()
    assert stderr_lines(tmp_path / "next.err") == []
    assert visible_files(tmp_path / "after_next") == visible_files(tmp_path / "before")
