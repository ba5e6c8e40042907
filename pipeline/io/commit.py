"""How a run puts its result into --output_dir without ever leaving it half old, half new.

- A lock file, <output_dir>/.hardpos.lock, is held for the whole run: a second run into the same folder is
  refused with one line. Local folders use fcntl.flock, which the kernel releases when the holder dies, so a
  SIGKILLed run never blocks the next one. On gs:// the lock is an object naming pid and host, deleted at the
  end; one left by a run that died elsewhere is named in the refusal, to be deleted by hand.
- The run writes everything into a staging folder inside the target, <output_dir>/.staging-<stage>-<id>/, laid
  out like the target. Readers skip dot-folders (datasets, pyarrow.dataset, glob), and the earlier result is
  untouched while the run computes.
- Once the pipeline is done and its counts are checked, commit() writes <staging>/commit.json (the point of no
  return), moves each table in (locally one rename of the table folder, so a table is either all old or all new),
  then its dead letters and samples, merges the stage's sections into report.json, written last, and removes the
  staging folder.
- The next run into the folder, holding the lock, finishes a commit that was interrupted (commit.json is there)
  and deletes staging folders of runs that never reached it.
Files outside what a stage writes (its table folders' shards, its dead-letter shards, its top-level files) are
never touched: stages sharing an output folder keep each other's tables and report sections.
"""
from __future__ import annotations

import fcntl
import json
import os
import posixpath
import socket
import time
import uuid

from apache_beam.io.filesystems import FileSystems

from pipeline.io.dead_letters import DISCARDED, REJECTED
from pipeline.io.parquet import SHARD_NAME
from pipeline.io.report import REPORT_FILE, format_markdown, merge_reports, read_json, write_json
from pipeline.options import UsageError

LOCK_FILE = ".hardpos.lock"
STAGING_PREFIX = ".staging-"
COMMIT_FILE = "commit.json"
REPLACED_PREFIX = ".replaced-"  # inside the staging folder: a table folder moved aside, deleted at the end
REPORT_MD = REPORT_FILE.removesuffix(".json") + ".md"


def is_local(path: str) -> bool:
    return "://" not in path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class FolderLock:
    """`with FolderLock(folder, stage):` holds <folder>/.hardpos.lock, creating the folder; UsageError (one line)
    when another run holds it, or when the folder cannot be written (a file, read-only): so before any compute."""

    def __init__(self, folder: str, stage: str, flag: str = "--output_dir"):
        self.folder, self.stage, self.flag = folder, stage, flag
        self.path = FileSystems.join(folder, LOCK_FILE)
        self._fd = None
        self.holder = {"pid": os.getpid(), "host": socket.gethostname(), "stage": stage,
                       "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    def _refuse(self, holder: dict, hint: str = ""):
        who = f"stage {holder.get('stage')}, pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('since')}"
        return UsageError(f"{self.flag}={self.folder} is being written by another run ({who}); wait for it to end "
                          f"or choose another folder{hint}")

    def _unwritable(self, e: OSError):
        if isinstance(e, (FileExistsError, NotADirectoryError)) or (os.path.exists(self.folder)
                                                                     and not os.path.isdir(self.folder)):
            return UsageError(f"{self.flag}={self.folder} is a file, not a folder")
        return UsageError(f"{self.flag}={self.folder}: cannot write there ({e.strerror or e})")

    def __enter__(self):
        if is_local(self.folder):
            self._lock_local()
        else:
            self._lock_remote()
        return self

    def _lock_local(self):
        try:
            os.makedirs(self.folder, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise self._unwritable(e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
            except ValueError:
                holder = {}
            os.close(fd)
            raise self._refuse(holder) from None
        try:  # the folder may allow opening an existing lock file but not creating files
            probe = os.path.join(self.folder, f".hardpos-write-test-{uuid.uuid4().hex[:8]}")
            with open(probe, "wb"):
                pass
            os.remove(probe)
        except OSError as e:
            os.close(fd)
            raise self._unwritable(e) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self.holder).encode("utf-8"), 0)
        self._fd = fd  # never unlinked: unlinking a flock file lets two runs lock two different files

    def _lock_remote(self):
        if FileSystems.exists(self.path):
            try:
                holder = read_json(self.path)
            except (OSError, ValueError):
                holder = {}
            stale = holder.get("host") == self.holder["host"] and not _pid_alive(int(holder.get("pid", 0) or 0))
            if not stale:
                raise self._refuse(holder, f"; if that run is gone, delete {self.path}")
        try:
            write_json(self.path, self.holder)
        except Exception as e:  # FileSystems wraps the remote errors
            raise UsageError(f"{self.flag}={self.folder}: cannot write there ({str(e).splitlines()[0]})") from None

    def __exit__(self, *exc):
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None
        elif not is_local(self.folder):
            try:
                FileSystems.delete([self.path])
            except Exception:  # noqa: BLE001 - a lock that is already gone is released
                pass


# ---------------------------------------------------------------------------------------------- staging

def new_staging(target: str, stage: str) -> str:
    staging = FileSystems.join(target, f"{STAGING_PREFIX}{stage}-{uuid.uuid4().hex[:12]}")
    if is_local(target):  # object stores have no folders to make
        FileSystems.mkdirs(staging)
    return staging


def staging_folders(target: str) -> list[str]:
    """The staging folders in target: runs in progress (under their lock), finished but not committed, or dead."""
    if is_local(target):
        if not os.path.isdir(target):
            return []
        return sorted(os.path.join(target, n) for n in os.listdir(target) if n.startswith(STAGING_PREFIX))
    files = FileSystems.match([FileSystems.join(target, f"{STAGING_PREFIX}*/**")])[0].metadata_list
    prefix = target.rstrip("/") + "/"
    return sorted({prefix + m.path[len(prefix):].split("/", 1)[0] for m in files})


def remove_tree(path: str) -> None:
    if is_local(path):
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        return
    files = [m.path for m in FileSystems.match([FileSystems.join(path, "**")])[0].metadata_list]
    if files:
        FileSystems.delete(files)


def _files(folder: str) -> list[str]:
    """Every file under folder (recursive), as paths."""
    if is_local(folder):
        return sorted(os.path.join(d, f) for d, _, names in os.walk(folder) for f in names)
    return sorted(m.path for m in FileSystems.match([FileSystems.join(folder, "**")])[0].metadata_list)


def _relative(path: str, folder: str) -> str:
    return path[len(folder.rstrip("/")) + 1:].replace(os.sep, "/")


def _move(src: str, dest: str) -> None:
    if is_local(dest):
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.replace(src, dest)
    else:
        FileSystems.rename([src], [dest])  # copy + delete on GCS


def _shards(folder: str, prefix: str = "*") -> list[str]:
    pattern = FileSystems.join(folder, f"{prefix}-?????-of-?????.parquet")
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


# ---------------------------------------------------------------------------------------------- commit

def _swap_table_folder(staging: str, target: str, table: str) -> None:
    new, old = FileSystems.join(staging, table), FileSystems.join(target, table)
    if is_local(target):
        aside = os.path.join(staging, REPLACED_PREFIX + table)
        if os.path.isdir(new):
            if os.path.isdir(old):
                os.rename(old, aside)
            os.rename(new, old)  # the table is all old or all new, at every moment
        if os.path.isdir(aside):  # files in the folder that no run wrote (not shards) stay the user's
            for path in _files(aside):
                if not SHARD_NAME.match(os.path.basename(path)):
                    _move(path, os.path.join(old, _relative(path, aside)))
        return
    staged = _files(new)
    names = {_relative(p, new) for p in staged}
    stale = [p for p in _shards(old) if _relative(p, old) not in names]
    if stale:
        FileSystems.delete(stale)
    for path in staged:
        _move(path, FileSystems.join(old, _relative(path, new)))


def _move_dead_letters(staging: str, target: str, table: str) -> None:
    for kind in (REJECTED, DISCARDED):
        new_dir, old_dir = FileSystems.join(staging, kind), FileSystems.join(target, kind)
        staged = _shards(new_dir, table)
        names = {posixpath.basename(p.replace(os.sep, "/")) for p in staged}
        stale = [p for p in _shards(old_dir, table) if posixpath.basename(p.replace(os.sep, "/")) not in names]
        if stale:
            FileSystems.delete(stale)
        for path in staged:
            _move(path, FileSystems.join(old_dir, posixpath.basename(path.replace(os.sep, "/"))))


def commit(staging: str, target: str, stage_report: dict | None = None) -> dict:
    """Moves a finished run from its staging folder into target and merges its report; returns the folder report.
    With stage_report None, finishes a commit that was interrupted (from the staging folder's commit.json)."""
    marker = FileSystems.join(staging, COMMIT_FILE)
    if stage_report is None:
        stage_report = read_json(marker)
    else:
        write_json(marker, stage_report)  # from here on, the next run finishes this commit if this one dies
    tables = list(stage_report["tables"])
    for table in tables:
        _swap_table_folder(staging, target, table)
        _move_dead_letters(staging, target, table)
    skip = {COMMIT_FILE, REPORT_FILE}
    for path in _files(staging):
        name = _relative(path, staging)
        if "/" not in name and name not in skip:  # samples files and the like
            _move(path, FileSystems.join(target, name))
    report_path = FileSystems.join(target, REPORT_FILE)
    earlier = read_json(report_path) if FileSystems.exists(report_path) else None
    folder_report = merge_reports(earlier, stage_report)
    _write_replacing(FileSystems.join(target, REPORT_MD), format_markdown(folder_report))
    _write_replacing(report_path, json.dumps(folder_report, indent=2) + "\n")  # last: the result is complete
    remove_tree(staging)
    return folder_report


def _write_replacing(path: str, text: str) -> None:
    """Readers see the old file or the new one, never a half-written one (locally; GCS objects appear whole)."""
    temp = path + ".tmp"
    with FileSystems.create(temp) as f:
        f.write(text.encode("utf-8"))
    _move(temp, path)


def recover(target: str) -> list[str]:
    """Under the folder's lock: finish interrupted commits, delete what unfinished runs staged. Returns a line
    per staging folder dealt with."""
    done = []
    for staging in staging_folders(target):
        marker = FileSystems.join(staging, COMMIT_FILE)
        if FileSystems.exists(marker):
            stage = read_json(marker).get("stage", "?")
            commit(staging, target)
            done.append(f"finished the interrupted commit of --stage={stage} in {target}")
        else:
            remove_tree(staging)
            done.append(f"removed {staging}, left by a run that did not finish")
    return done
