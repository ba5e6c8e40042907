"""Big PCollections through files instead of the runner's shuffle, so that a local run's memory does not grow with
its input.

Beam's local runner (the FnApiRunner behind the DirectRunner) keeps every PCollection that crosses a stage boundary
(a GroupByKey, a multi-input Flatten, a ParDo waiting on a side input) in the launcher's memory, and hands each
worker its half of a stage's input as one bundle: at 591,753 captions that was 7.3 GiB, growing 0.75 GiB per
100,000 captions. Here the producer writes the elements to files in a spill folder as they come (pickled, a block
at a time) and only the files' paths cross the boundary; the consumer, in a stage of its own, reads them back. A
grouping writes each element to the file of its key's partition and groups one partition at a time.

Off (every function the identity, or Beam's GroupByKey) unless the launcher set a spill folder for the run
(pipeline/run.py: the local runner by default, Dask with a shared --spill_dir; Dataflow's shuffle service needs
none). Outputs never depend on it: consumers
sort where order matters, as they must after any shuffle. A file is named by a random id, so bundles, workers and
retries never share one; the folder is removed after the run, and a later run removes that of a run that was
killed (its lock file, held while it lives, is then free: make_folder).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import re
import shutil
import stat
import tempfile
import time
import uuid
import zlib

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from pipeline.tables.folders import SPILL_MARK, SPILL_PREFIX

BLOCK = 512  # elements per pickle.dump: few calls, little held
PARTITIONS = 64  # a grouping's partitions: at 3.3 M captions about 52,000 keys each, grouped in one worker

_directory: str | None = None


@contextlib.contextmanager
def spilling(directory: str | None):
    """Graphs built inside spill to `directory` (None: they use the runner's own shuffles)."""
    global _directory
    if directory is not None:
        os.makedirs(directory, exist_ok=True)
    before, _directory = _directory, directory
    try:
        yield
    finally:
        _directory = before


def directory() -> str | None:
    return _directory


# PREFIX names each run's spill folder; MARK, in it, is locked (flock) by the run for as long as it lives. Defined
# with the other folders a tool's output must stay out of (tables/folders.output_folder_problem).
PREFIX, MARK = SPILL_PREFIX, SPILL_MARK
_held: dict[str, int] = {}  # this process's spill folders -> their lock's descriptor
MAKING_SECONDS = 60  # a folder still under its making name after this long was left by a run killed then


def make_folder(parent: str | None, stage: str) -> str:
    """A new spill folder of this run in parent (default: the temporary folder), holding its lock; first the
    folders of runs that died there (SIGKILL: at CC3M's size, GBs each) are removed. The folder is made and
    locked under a dot-name and renamed into place, so that no other run ever finds it unlocked. OSError when
    parent cannot hold it."""
    parent = parent or tempfile.gettempdir()
    remove_stale(parent)
    making = tempfile.mkdtemp(prefix=f".{PREFIX}making-", dir=parent)
    fd = os.open(os.path.join(making, MARK), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    folder = os.path.join(parent, f"{PREFIX}{stage}-{uuid.uuid4().hex[:12]}")
    os.rename(making, folder)
    _held[folder] = fd
    return folder


# The names this module gives: a run's folder (make_folder: the stage, 12 hex digits), the same while it is removed
# (remove_folder), and a folder being made (tempfile.mkdtemp's random part: lower-case letters, digits, _).
_RUN_FOLDER = re.compile(rf"^{re.escape(PREFIX)}[a-z0-9_]+-[0-9a-f]{{12}}(?:\.removing)?$")
_MAKING_FOLDER = re.compile(rf"^\.{re.escape(PREFIX)}making-[a-z0-9_]+$")


def _dead_runs_lock(folder: str) -> int | None:
    """The lock of folder, now held by this process, when folder is provably a spill folder of a run that is gone:
    it holds the lock file, a regular file (not a link), and no process holds its lock (the kernel releases a dead
    process's flock). None otherwise: a folder without the lock file is not one this version made, and one whose
    lock is held is a live run's (or being removed by one)."""
    try:
        fd = os.open(os.path.join(folder, MARK), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_stale(parent: str) -> list[str]:
    """Removes the spill folders in parent whose run is gone, and those a removal left half done; the folders
    removed. Only what is provably such a folder: a name this module gives, holding the lock file, whose lock is
    free (_dead_runs_lock). Anything else, a user's `hardpos-spill-mine.removing` too, is left."""
    removed = []
    try:
        entries = [e for e in os.scandir(parent) if (_RUN_FOLDER.match(e.name) or _MAKING_FOLDER.match(e.name))
                   and e.is_dir(follow_symlinks=False)]
    except OSError:
        return removed
    for entry in entries:
        if entry.name.startswith(".") and time.time() - entry.stat(follow_symlinks=False).st_mtime < MAKING_SECONDS:
            continue  # being made this moment, its lock perhaps not yet taken
        fd = _dead_runs_lock(entry.path)
        if fd is None:
            continue
        try:
            if entry.name.endswith(".removing"):  # a removal cut short: its lock file is the last thing removed
                _remove_tree(entry.path)
            else:
                remove_folder(entry.path)
            removed.append(entry.path)
        finally:
            os.close(fd)
    return removed


def _remove_tree(folder: str) -> None:
    """Removes a spill folder, its lock file last: a removal cut short leaves a folder the next run can still tell
    is a spill folder, and finish."""
    try:
        with os.scandir(folder) as entries:
            found = list(entries)
    except OSError:
        return
    for entry in found:
        if entry.name == MARK:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    with contextlib.suppress(OSError):
        if os.listdir(folder) in ([MARK], []):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, MARK))
            os.rmdir(folder)


def remove_folder(folder: str) -> None:
    """Removes a run's spill folder, also while a stopped run's threads still write: renamed first, it can gain
    no new file (a Writer makes only its leaf folder), so the removal of the renamed one is complete. Its lock is
    released after."""
    gone = f"{folder}.removing"
    try:
        try:
            os.rename(folder, gone)
        except FileNotFoundError:
            return
        _remove_tree(gone)
    finally:
        fd = _held.pop(folder, None)
        if fd is not None:
            os.close(fd)


def partition_of(key, partitions: int) -> int:
    """A stable partition of a key (str, int, bytes or a tuple of them): the same on every worker and run."""
    data = key if isinstance(key, bytes) else repr(key).encode("utf-8", "surrogatepass")
    return zlib.crc32(data) % partitions


def global_value(value):
    return WindowedValue(value, GlobalWindow().max_timestamp(), (GlobalWindow(),))


class Writer:
    """One spill file, written a block at a time."""

    def __init__(self, folder: str, name: str):
        try:  # the leaf only: a run's spill folder, once removed (remove_folder), is never made again
            os.mkdir(folder)
        except FileExistsError:
            pass
        self.path = os.path.join(folder, f"{name}-{uuid.uuid4().hex}.pkl")
        self.file = open(self.path, "wb")
        self.block, self.count = [], 0

    def add(self, element):
        self.block.append(element)
        self.count += 1
        if len(self.block) >= BLOCK:
            self._flush()

    def _flush(self):
        if self.block:
            pickle.dump(self.block, self.file, protocol=pickle.HIGHEST_PROTOCOL)
            self.block = []

    def close(self) -> str:
        self._flush()
        self.file.close()
        return self.path


def read_file(path: str):
    """The elements of a spill file, in the order written."""
    with open(path, "rb") as f:
        while True:
            try:
                block = pickle.load(f)
            except EOFError:
                return
            yield from block


class _SpillFn(beam.DoFn):
    """Elements -> files; at the end of each bundle, (partition, path) per file written. With `partitions`, an
    element is a (key, value) pair and goes to the file of its key's partition."""

    def __init__(self, folder: str, name: str, partitions: int = 0, tag=None):
        self.folder, self.name, self.partitions, self.tag = folder, name, partitions, tag

    def start_bundle(self):
        self.writers: dict[int, Writer] = {}

    def process(self, element):
        index = partition_of(element[0], self.partitions) if self.partitions else 0
        writer = self.writers.get(index)
        if writer is None:
            writer = self.writers[index] = Writer(self.folder, f"{self.name}-{index}")
        writer.add(element if self.tag is None else (element[0], (self.tag, element[1])))

    def finish_bundle(self):
        for index, writer in sorted(self.writers.items()):
            yield global_value((index, writer.close()))
        self.writers = {}


def _folder(name: str) -> str:
    return os.path.join(_directory, name.replace("/", "_").replace(" ", "_"))


def spill(pcoll, label: str):
    """Elements -> a PCollection of spill files holding them (the elements themselves when not spilling)."""
    if _directory is None:
        return pcoll
    return (pcoll | f"Spill{label}" >> beam.ParDo(_SpillFn(_folder(label), label))
            | f"Spilled{label}" >> beam.Map(lambda item: item[1]))


def _read_after(path: str, *_):
    return read_file(path)


def unspill(files, label: str, *wait_for):
    """spill's files -> their elements (the elements as they are when not spilling). `wait_for`: the side inputs
    of the step that consumes them. The files are read once those are ready, in the consumer's own stage; read
    earlier, the read is fused into the producer's stage and the elements are kept whole between the two, as
    if never spilled. Call it once per such consumer."""
    if _directory is None:
        return files
    return files | f"Unspill{label}" >> beam.FlatMap(_read_after, *wait_for)


def spill_each(pcolls, label: str):
    """Several PCollections -> one PCollection of their spill files (their Flatten when not spilling): a Flatten of
    big inputs is itself kept whole by the local runner, a Flatten of paths is not."""
    pcolls = list(pcolls)
    if _directory is None:
        return pcolls | f"All{label}" >> beam.Flatten() if len(pcolls) > 1 else pcolls[0]
    files = [spill(p, f"{label}{i}") for i, p in enumerate(pcolls)]
    return files | f"AllFiles{label}" >> beam.Flatten() if len(files) > 1 else files[0]


def _group_partition(item):
    """(partition, files) -> (key, [values]) for every key in them, in key order (a partition's keys are grouped in
    memory: a partition is 1/PARTITIONS of the input)."""
    _, paths = item
    groups: dict = {}
    for path in sorted(paths):
        for key, value in read_file(path):
            groups.setdefault(key, []).append(value)
    for key in sorted(groups, key=repr):
        yield key, groups.pop(key)


def group_by_key(pcoll, label: str, partitions: int = PARTITIONS):
    """(key, value) pairs -> (key, [values]): Beam's GroupByKey, or the files' version when spilling."""
    if _directory is None:
        return pcoll | label >> beam.GroupByKey()
    return _grouped({None: pcoll}, label, partitions)


def _grouped(tagged: dict, label: str, partitions: int):
    """{tag: (key, value) pairs} -> (key, [value, or (tag, value) where tag is not None])."""
    folder = _folder(label)
    files = [pcoll | f"{label}Spill{i}" >> beam.ParDo(_SpillFn(folder, f"{label}{i}", partitions, tag))
             for i, (tag, pcoll) in enumerate(sorted(tagged.items(), key=lambda item: repr(item[0])))]
    files = files | f"{label}Files" >> beam.Flatten() if len(files) > 1 else files[0]
    return (files | f"{label}ByPartition" >> beam.GroupByKey()
            | f"{label}Group" >> beam.FlatMap(_group_partition))


def _co_grouped(item, tags):
    key, values = item
    found = {tag: [] for tag in tags}
    for tag, value in values:
        found[tag].append(value)
    return key, found


def co_group_by_key(tagged: dict, label: str, partitions: int = PARTITIONS):
    """{tag: (key, value) pairs} -> (key, {tag: [values]}): Beam's CoGroupByKey, or the files' version."""
    if _directory is None:
        return tagged | label >> beam.CoGroupByKey()
    tags = sorted(tagged)
    return (_grouped(tagged, label, partitions)
            | f"{label}ByTag" >> beam.Map(_co_grouped, tags))
