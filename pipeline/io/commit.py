"""How a run puts its result into --output_dir without ever leaving it half old, half new.

- A lock file, <output_dir>/.hardpos.lock, is held for the whole run: a second run into the same folder is
  refused with one line. Local folders use fcntl.flock, which the kernel releases when the holder dies, so a
  SIGKILLed run never blocks the next one. On gs:// the lock is an object naming pid and host, deleted at the
  end; one left by a run that died elsewhere is named in the refusal, to be deleted by hand.
- The run writes everything into a staging folder inside the target, <output_dir>/.staging-<stage>-<id>/, laid
  out like the target, with a mark (.hardpos-staging) made with it: recovery only ever touches folders holding
  that mark, so a folder of the user's that happens to be called .staging-* is never deleted. Readers skip
  dot-folders (datasets, pyarrow.dataset, glob), and the earlier result is untouched while the run computes.
  A chain (--stage=all) stages all its tables in one staging folder and commits them together.
- Once the pipeline is done and its counts are checked, commit() writes <staging>/commit.json (the point of no
  return; written whole or not at all): the stage reports and the list of staged files. Then it moves each table
  in (locally one rename of the table folder, so a table is either all old or all new), then its dead letters and
  samples, merges the stages' sections into report.json, written last, and removes the staging folder.
- Every step of a commit goes by that record, never by what is left to move: the next run into the folder,
  holding the lock, finishes a commit that was cut short at any step (SIGKILL, a full disk) and places exactly
  what the record lists, deleting only shards the record replaces. A record that cannot be read is set aside
  (the staging folder renamed .damaged-*) with one line, never a crash loop; staging folders of runs that never
  wrote one are deleted.
- Nothing is written or deleted through a symbolic link: a table or dead-letter folder that is a link is refused
  with one line (before any work, and again before the record), the lock file is opened without following
  one, and the report files are written under fresh names in the staging folder and renamed over their paths.
- SIGINT and SIGTERM (pipeline/run.py installs SIGNALS for both) stop a run where it is; a commit never begins
  after one, and one that has begun (a few renames) is finished first.
Files outside what a stage writes (its table folders' shards, its dead-letter shards, its top-level files) are
never touched: stages sharing an output folder keep each other's tables and report sections.
"""
from __future__ import annotations

import json
import os
import posixpath
import signal
import sys
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path

from apache_beam.io.filesystems import FileSystems

from pipeline.folder_lock import LOCK_FILE, LockRefused, held_by_another, holder_record, lock_local
from pipeline.io.dead_letters import DISCARDED, REJECTED
from pipeline.io.report import format_markdown, merge_reports, read_json, write_json
from pipeline.options import UsageError
from pipeline.tables.folders import (
    COMMIT_FILE,
    REPORT_FILE,
    STAGING_MARK,
    STAGING_PREFIX,
    is_published_folder,
    local_staging_folders,
)
from pipeline.tables.shards import SHARD_NAME, shard_glob
from pipeline.urls import has_scheme

DAMAGED_PREFIX = ".damaged-"  # a staging folder whose commit record cannot be read, set aside
REPLACED_PREFIX = ".replaced-"  # inside the staging folder: a table folder moved aside, deleted at the end
REPORT_MD = REPORT_FILE.removesuffix(".json") + ".md"
_NOT_RESULT = {COMMIT_FILE, REPORT_FILE, STAGING_MARK}  # files of a staging folder that are not moved in


def is_local(path: str) -> bool:
    return not has_scheme(path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def below_output(target, output_dir) -> tuple[str, list[str]] | None:
    """(the real folder of the first part of target's path that is the output folder or inside it, the names of
    target's parts below it), or None when target is not below the output folder at all."""
    real_out = os.path.realpath(output_dir)
    parts = Path(os.path.normpath(os.path.abspath(target))).parts
    for i in range(1, len(parts) + 1):
        real = os.path.realpath(Path(*parts[:i]))
        if real == real_out or Path(real).is_relative_to(real_out):
            return real, list(parts[i:])
    return None


def link_below_output(flag: str, target, path) -> str:
    return (f"{flag} {target}: {path} is a symbolic link in the output folder, which hardpos never writes through; "
            f"remove the link or choose another {flag}")


def folder_path_problem(flag: str, target, output_dir) -> str | None:
    """Why a folder a stage writes (--publish_dir, --images_dir) is not reached the way its name reads: a `..` in it
    that climbs out of a link (`<out>/x/../hub` through a link x lands beside x's target), or a link at any part of it
    below the output folder, however the output folder is named (a link planted there would have the stage write
    anywhere). None when there is none."""
    lexical = Path(os.path.normpath(os.path.abspath(target)))
    if ".." in Path(target).parts and os.path.realpath(target) != os.path.realpath(lexical):
        return (f"{flag} {target}: its '..' climbs out of a symbolic link (it leads to {os.path.realpath(target)}, "
                f"not {lexical}); name the folder without '..'")
    below = below_output(target, output_dir)
    if below is None:
        return None
    path = Path(below[0])
    for part in below[1]:
        path = path / part
        if os.path.islink(path):
            return link_below_output(flag, target, path)
        if not path.exists():
            return None
    return None


class FolderLock:
    """`with FolderLock(folder, stage):` holds <folder>/.hardpos.lock, creating the folder; UsageError (one line)
    when another run holds it, or when the folder cannot be written (a file, read-only): so before any compute.
    A local folder's lock is pipeline/folder_lock.py's, the trainer's too."""

    def __init__(self, folder: str, stage: str, flag: str = "--output_dir"):
        self.folder, self.stage, self.flag = folder, stage, flag
        self.path = FileSystems.join(folder, LOCK_FILE)
        self._fd = None
        self.holder = holder_record(stage)

    def __enter__(self):
        if is_local(self.folder):
            try:
                self._fd = lock_local(self.folder, self.holder, self.flag)
            except LockRefused as e:
                raise UsageError(str(e)) from None
        else:
            self._lock_remote()
        return self

    def _lock_remote(self):
        if FileSystems.exists(self.path):
            try:
                holder = read_json(self.path)
            except (OSError, ValueError):
                holder = {}
            stale = holder.get("host") == self.holder["host"] and not _pid_alive(int(holder.get("pid", 0) or 0))
            if not stale:
                raise UsageError(held_by_another(self.flag, self.folder, holder,
                                                 f"; if that run is gone, delete {self.path}"))
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


# ---------------------------------------------------------------------------------------------- signals

class CommitFinished(KeyboardInterrupt):
    """A signal arrived during a commit, which was finished before the run stopped."""


class Signals:
    """SIGINT and SIGTERM as the commit protocol takes them. `handle` stops the run where it is (KeyboardInterrupt),
    except inside a commit, which is finished first; and no commit begins once a signal has arrived, wherever its
    KeyboardInterrupt went: Python drops one raised inside a weakref callback or __del__, and Beam turns one raised
    in a DoFn into a RuntimeError."""

    def __init__(self):
        self.received: str | None = None  # the first signal's name
        self._committing = 0
        self._deferred = 0

    def handle(self, signum, frame) -> None:
        self.received = self.received or signal.Signals(signum).name
        if not (self._committing or self._deferred):
            raise KeyboardInterrupt

    @contextmanager
    def deferred(self):
        """A signal arriving inside stops the run at the end of the section, not in it: a staging folder made
        inside is already in the caller's hands, which remove it (a signal between its making and the caller's
        assignment would leave it behind)."""
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1
        if self.received and not (self._committing or self._deferred):
            raise KeyboardInterrupt

    @contextmanager
    def installed(self):
        """SIGINT and SIGTERM handled while inside (pipeline/run.py's main); elsewhere than in the main thread,
        where Python allows no handler, nothing changes."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        self.received = None
        earlier = {sig: signal.signal(sig, self.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        unraisable, in_thread = sys.unraisablehook, threading.excepthook

        def drop_our_interrupts(found):  # one that Python could not raise: the commit it would stop does not begin
            if not (self.received and isinstance(found.exc_value, KeyboardInterrupt)):
                unraisable(found)

        def quiet_after_a_signal(found):  # a runner's threads failing as its workers stop: main says it in a line
            if not self.received:
                in_thread(found)

        sys.unraisablehook, threading.excepthook = drop_our_interrupts, quiet_after_a_signal
        try:
            yield
        finally:
            sys.unraisablehook, threading.excepthook = unraisable, in_thread
            for sig, handler in earlier.items():
                signal.signal(sig, handler)

    @contextmanager
    def commit_section(self):
        self._committing += 1
        try:
            if self.received:  # before the point of no return: the commit does not begin
                raise KeyboardInterrupt
            yield
        finally:
            self._committing -= 1
        if self.received and not self._committing:
            raise CommitFinished


SIGNALS = Signals()


# ---------------------------------------------------------------------------------------------- staging

def new_staging(target: str, stage: str) -> str:
    staging = FileSystems.join(target, f"{STAGING_PREFIX}{stage}-{uuid.uuid4().hex[:12]}")
    mark = FileSystems.join(staging, STAGING_MARK)
    if is_local(target):  # object stores have no folders to make
        os.makedirs(staging)
        try:
            os.close(os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))  # empty: it takes no disk space
        except BaseException:
            os.rmdir(staging)
            raise
    else:
        with FileSystems.create(mark):
            pass
    return staging


def staging_folders(target: str) -> list[str]:
    """The staging folders hardpos made in target: runs in progress (under their lock), finished but not committed,
    or dead. Other .staging-* entries are the user's and never touched."""
    if is_local(target):
        return local_staging_folders(target)
    marks = FileSystems.match([FileSystems.join(target, f"{STAGING_PREFIX}*", STAGING_MARK)])[0].metadata_list
    prefix = target.rstrip("/") + "/"
    return sorted({prefix + m.path[len(prefix):].split("/", 1)[0] for m in marks})


def remove_tree(path: str) -> None:
    if is_local(path):
        import shutil

        shutil.rmtree(path, ignore_errors=True)  # never follows the links inside
        return
    files = [m.path for m in FileSystems.match([FileSystems.join(path, "**")])[0].metadata_list]
    if files:
        FileSystems.delete(files)


def remove_staging(staging: str) -> None:
    """The record first (what is left is a run that never committed, deleted by the next run), the mark last (what
    is left is still known as ours)."""
    record, mark = FileSystems.join(staging, COMMIT_FILE), FileSystems.join(staging, STAGING_MARK)
    if is_local(staging):
        if not os.path.isdir(staging):
            return
        if os.path.lexists(record):
            os.unlink(record)
        for name in os.listdir(staging):
            path = os.path.join(staging, name)
            if name == STAGING_MARK:
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                remove_tree(path)
            else:
                os.unlink(path)
        if os.path.lexists(mark):
            os.unlink(mark)
        os.rmdir(staging)
        return
    for batch in ([record], [f for f in _files(staging) if f not in (record, mark)], [mark]):
        present = [f for f in batch if FileSystems.exists(f)]
        if present:
            FileSystems.delete(present)


def committing(staging: str) -> bool:
    """Whether the staging folder's run reached its commit record (the next run finishes that commit)."""
    return FileSystems.exists(FileSystems.join(staging, COMMIT_FILE))


def _files(folder: str) -> list[str]:
    """Every file under folder (recursive), as paths: locally links too (links to folders are not entered)."""
    if is_local(folder):
        if os.path.islink(folder):
            return []
        return sorted(os.path.join(d, f) for d, dirs, names in os.walk(folder)
                      for f in names + [s for s in dirs if os.path.islink(os.path.join(d, s))])
    return sorted(m.path for m in FileSystems.match([FileSystems.join(folder, "**")])[0].metadata_list)


def _relative(path: str, folder: str) -> str:
    return path[len(folder.rstrip("/")) + 1:].replace(os.sep, "/")


def _move(src: str, dest: str) -> None:
    if is_local(dest):
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.replace(src, dest)  # replaces a link at dest, never writes through it
    else:
        FileSystems.rename([src], [dest])  # copy + delete on GCS


def _delete(paths: list[str]) -> None:
    if paths:
        FileSystems.delete(paths)


def _shards(folder: str, prefix: str = "*") -> list[str]:
    pattern = FileSystems.join(folder, shard_glob(prefix))
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


def replace_file(path: str, data: bytes, temp_dir: str | None = None) -> None:
    """Readers see the old file or the new one, never a half-written one. Locally the new file is made under a
    fresh name in temp_dir (the path's folder unless given; on the same disk) and renamed over the path: nothing
    already there (a link planted at a fixed temp name, or at the path itself) is opened for writing."""
    if not is_local(path):  # objects appear whole
        with FileSystems.create(path) as f:
            f.write(data)
        return
    folder = temp_dir or os.path.dirname(path)
    temp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex[:12]}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException as e:
        if os.path.lexists(temp):
            os.unlink(temp)
        if isinstance(e, OSError) and e.filename is None:  # a failed write names no file: say which
            raise OSError(e.errno, e.strerror, path) from None
        raise


def refuse_links(target: str, tables) -> None:
    """UsageError (one line) when a folder a commit writes into and deletes in is a symbolic link: hardpos never
    writes or deletes through a link it did not make."""
    if not is_local(target):
        return
    for name in (*tables, REJECTED, DISCARDED):
        path = os.path.join(target, name)
        if os.path.islink(path):
            raise UsageError(f"--output_dir={target}: {name} is a symbolic link (to {os.readlink(path)}); hardpos "
                             f"writes tables only into folders of its own, never through a link: remove the link "
                             f"or choose another --output_dir")
    # What a commit places must be of the kind it places, or missing: a user's file where a table folder goes would be
    # moved aside and deleted; a folder where report.md goes would stop the commit half way, at every run.
    kinds = [(name, True) for name in (*tables, REJECTED, DISCARDED)] + \
            [(name, False) for name in (REPORT_FILE, REPORT_MD, *(f"{t}_samples.md" for t in tables))]
    for name, folder in kinds:
        path = os.path.join(target, name)
        if os.path.lexists(path) and (os.path.isdir(path) != folder or not (folder or os.path.isfile(path))):
            found = "a folder" if os.path.isdir(path) else "a file" if os.path.isfile(path) else "not a regular file"
            raise UsageError(f"--output_dir={target}: {name} is {found}, where a run writes its "
                             f"{'table folder' if folder else 'file'} {name}; move it away or choose another "
                             f"--output_dir")
        if folder and is_published_folder(Path(path)):  # its shards would land beside the release's card and manifest
            raise UsageError(f"--output_dir={target}: {name} is a published folder (--stage=publish made it there), "
                             f"where a run writes its table folder {name}; move the release or choose another "
                             f"--output_dir")


# ---------------------------------------------------------------------------------------------- commit

def _swap_table_folder(staging: str, target: str, table: str, files: list[str]) -> None:
    new, old = FileSystems.join(staging, table), FileSystems.join(target, table)
    if is_local(target):
        aside = os.path.join(staging, REPLACED_PREFIX + table)
        if os.path.isdir(new):
            if os.path.lexists(old):
                os.rename(old, aside)
            os.rename(new, old)  # the table is all old or all new, at every moment
        for path in _files(aside):  # files in the folder that no run wrote (not its top-level shards) stay the user's
            if "/" in _relative(path, aside) or not SHARD_NAME.match(os.path.basename(path)):
                _move(path, os.path.join(old, _relative(path, aside)))
        return
    staged = [name for name in files if name.startswith(table + "/")]
    placed = {name[len(table) + 1:] for name in staged}
    _delete([p for p in _shards(old) if _relative(p, old) not in placed])
    for name in staged:
        if FileSystems.exists(FileSystems.join(staging, name)):
            _move(FileSystems.join(staging, name), FileSystems.join(target, name))


def _move_dead_letters(staging: str, target: str, table: str, files: list[str]) -> None:
    for kind in (REJECTED, DISCARDED):
        staged = [name for name in files if posixpath.dirname(name) == kind
                  and (m := SHARD_NAME.match(posixpath.basename(name))) and m["prefix"] == table]
        placed = {posixpath.basename(name) for name in staged}
        # the shards the record replaces: by the record's list, never by what is left in staging
        _delete([p for p in _shards(FileSystems.join(target, kind), table)
                 if posixpath.basename(p.replace(os.sep, "/")) not in placed])
        for name in staged:
            if FileSystems.exists(FileSystems.join(staging, name)):
                _move(FileSystems.join(staging, name), FileSystems.join(target, name))


def _check_record(record) -> dict:
    """The commit record, or ValueError saying what is wrong with it."""
    try:
        reports, files = record["reports"], record["files"]
        whole = bool(reports) and all(isinstance(r["stage"], str) and isinstance(r["tables"], dict) for r in reports)
        tables = [t for r in reports for t in r["tables"]] if whole else []
        # names that stay inside the folders: a record is a list of what to move where
        inside = all(isinstance(t, str) and t and "/" not in t and t not in (".", "..") for t in tables) and \
            all(isinstance(f, str) and f and not posixpath.isabs(f) and ".." not in f.split("/") for f in files)
    except (KeyError, TypeError):
        whole = inside = False
    if not (whole and inside):
        raise ValueError("not a list of stage reports and staged files inside the folder")
    return record


def _read_record(staging: str) -> dict:
    return _check_record(read_json(FileSystems.join(staging, COMMIT_FILE)))


def commit(staging: str, target: str, reports: list[dict]) -> dict:
    """Moves a finished run (one stage, or a chain's stages) from its staging folder into target in one commit and
    merges the reports into report.json; returns the folder report."""
    with SIGNALS.commit_section():
        refuse_links(target, [t for r in reports for t in r["tables"]])
        skip = {FileSystems.join(staging, name) for name in _NOT_RESULT}
        record = {"reports": reports, "files": [_relative(p, staging) for p in _files(staging) if p not in skip]}
        data = (json.dumps(_check_record(record), indent=2) + "\n").encode("utf-8")
        replace_file(FileSystems.join(staging, COMMIT_FILE), data, staging)  # the point of no return
        return _finish(staging, target, record)


def _finish(staging: str, target: str, record: dict) -> dict:
    """Places what the record lists; every step can be done again (the next run does them all again)."""
    files = record["files"]
    for report in record["reports"]:
        for table in report["tables"]:
            _swap_table_folder(staging, target, table, files)
            _move_dead_letters(staging, target, table, files)
    for name in files:  # samples files and the like
        if "/" not in name and FileSystems.exists(FileSystems.join(staging, name)):
            _move(FileSystems.join(staging, name), FileSystems.join(target, name))
    report_path = FileSystems.join(target, REPORT_FILE)
    folder_report = read_json(report_path) if FileSystems.exists(report_path) else None
    for report in record["reports"]:
        folder_report = merge_reports(folder_report, report)
    replace_file(FileSystems.join(target, REPORT_MD), format_markdown(folder_report).encode("utf-8"), staging)
    # last: the result is complete
    replace_file(report_path, (json.dumps(folder_report, indent=2) + "\n").encode("utf-8"), staging)
    remove_staging(staging)
    return folder_report


def _set_aside(staging: str, target: str) -> str:
    name = _relative(staging, target)
    aside = FileSystems.join(target, DAMAGED_PREFIX + name.removeprefix("."))
    if is_local(target):
        os.rename(staging, aside)
    else:
        for path in _files(staging):
            _move(path, FileSystems.join(aside, _relative(path, staging)))
    return aside


def recover(target: str) -> list[str]:
    """Under the folder's lock: finish interrupted commits, set aside staging folders whose commit record cannot be
    read, delete what unfinished runs staged. Returns a line per staging folder dealt with."""
    done = []
    for staging in staging_folders(target):
        if not committing(staging):
            remove_staging(staging)
            done.append(f"removed {staging}, left by a run that did not finish")
            continue
        try:
            record = _read_record(staging)
        except ValueError as e:
            aside = _set_aside(staging, target)
            done.append(f"{staging}: its commit record {COMMIT_FILE} is damaged ({str(e).splitlines()[0]}), so its "
                        f"commit cannot be finished; set aside as {aside}: look at it, then delete it")
            continue
        with SIGNALS.commit_section():
            refuse_links(target, [t for r in record["reports"] for t in r["tables"]])
            _finish(staging, target, record)
        stage = _relative(staging, target).removeprefix(STAGING_PREFIX).rsplit("-", 1)[0]
        done.append(f"finished the interrupted commit of --stage={stage} in {target}")
    return done
