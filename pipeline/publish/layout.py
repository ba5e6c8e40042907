"""The tables a run wrote, placed in a Hub dataset repository: data/<config>/<split>-SSSSS-of-NNNNN.parquet per
table, where <config> is the table's schema name. Finding and checking the tables (and a published folder's
manifest) is pipeline/tables/folders.py's, which reads them without Beam.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow.parquet as pq

# stages/publish.py imports these from here.
from pipeline.tables.folders import MANIFEST, NEXT, PublishError, find_tables, read_manifest  # noqa: F401
from pipeline.tables.folders import changed_file
from pipeline.tables.folders import find_reports  # noqa: F401
from pipeline.tables.folders import REPORT_FILE, Table, write_run_folder  # noqa: F401  (fixtures import it here)

# Publish's own entries at the top of the folder all start so (manifest, lock, the folder built aside): never
# uploaded (upload.LOCAL_ONLY), never the user's.
OWN_PREFIX = ".hardpos"


def plan(tables: list[Table]) -> list[tuple[Path, str, int]]:
    """(source file, path in the repository, rows) for every shard."""
    out = []
    for t in tables:
        for src, dest in zip(t.files, t.hub_paths(), strict=True):
            out.append((src, dest, pq.ParquetFile(src).metadata.num_rows))
    return out


def copy_hashed(source, out) -> str:
    """Copies an open file to another, 1 MB at a time; the sha256 of what was copied."""
    digest = hashlib.sha256()
    while chunk := source.read(1 << 20):
        digest.update(chunk)
        out.write(chunk)
    return digest.hexdigest()


def open_folder_below(base: Path, relative: str, refused=None) -> int:
    """A descriptor of the folder base/relative, made where missing, opened one name at a time from base with no
    link followed (O_NOFOLLOW): a link planted in a folder publish builds is refused (PublishError, its message
    `refused(path)` when given), never written through."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    path = Path(base)
    try:
        for part in Path(relative).parts:
            path = path / part
            try:
                os.mkdir(part, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                raise PublishError(refused(path) if refused else
                                   f"{base / relative}: {part} is not a folder publish made (a symbolic link or a "
                                   f"file planted there); nothing is written through it") from None
            os.close(fd)
            fd = inner
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_new(base: Path, relative: str, data: bytes = b"", mode: int = 0o644):
    """A new file base/relative (an earlier one or a link at that name removed, never followed), in a folder opened
    with open_folder_below; the open binary file to write to, or data written when given."""
    folder = open_folder_below(base, str(Path(relative).parent))
    try:
        name = Path(relative).name
        try:
            os.unlink(name, dir_fd=folder)
        except FileNotFoundError:
            pass
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder)
    finally:
        os.close(folder)
    out = os.fdopen(fd, "wb")
    if data:
        with out:
            out.write(data)
    return out


def place(src: Path, dest: str, base: Path, root: Path, sha256: str, recorded_in) -> tuple[int, int]:
    """The bytes of src (a shard under root), read through one descriptor opened from root with no link followed
    (tables/load.open_below), copied to base/dest (write_new: no link followed there either) as they are hashed: the
    release holds exactly the bytes whose sha256 its manifest records, whatever happens to src meanwhile or later.
    A copy, not a hard link: a link would share every later change of the run folder's file. PublishError when the
    bytes are not the recorded ones. Returns the copy's identity (file_identity): publish checks after its switch
    that the file served is this one."""
    from pipeline.tables.load import open_below

    source = os.fdopen(open_below(str(root), str(src)), "rb")
    with source, write_new(base, dest) as out:
        copied = copy_hashed(source, out)
        out.flush()
        found = file_identity(os.fstat(out.fileno()))
    if copied != sha256:
        (base / dest).unlink()
        raise changed_file(src, recorded_in)
    return found


def file_identity(found: os.stat_result) -> tuple:
    """What tells a file publish wrote from one put in its place: its inode, and (inode numbers are reused at once
    after a delete) its size and change time, which no one can set."""
    return found.st_dev, found.st_ino, found.st_size, found.st_ctime_ns
