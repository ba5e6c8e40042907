"""A local folder's lock file, <folder>/.hardpos.lock, held with fcntl.flock for as long as a run writes there.

Beam-free, so that the trainer (pipeline/train/finetune.py, --out) holds the same lock as the pipeline's commit
protocol (pipeline/io/commit.py, --output_dir) without installing the pipeline. The kernel releases a flock when
its holder dies, so a SIGKILLed run never blocks the next one; the file itself is never unlinked (unlinking a
flock file lets two runs lock two different files).
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import stat
import time
import uuid

from pipeline.urls import has_scheme

LOCK_FILE = ".hardpos.lock"


class LockRefused(Exception):
    """One line naming the flag and folder: another run holds the lock, the lock file is not hardpos's, or the
    folder cannot be written."""


def holder_record(stage: str) -> dict:
    """What a lock file says about the run holding it."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "stage": stage,
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


TOOLS = {"evaluate": "the evaluator's", "finetune": "the trainer's"}  # tools whose --out a lock file names


def tool_folder(folder: str) -> str | None:
    """Whose output folder a local folder is, where its lock file names a tool (TOOLS: "the evaluator's"), else None.
    A stage run must not write there: its report.md would replace the tool's, its tables sit beside the figures."""
    from pipeline.tables.folders import read_bounded

    try:
        holder = json.loads(read_bounded(os.path.join(folder, LOCK_FILE), 1 << 16, flags=os.O_NOFOLLOW))
    except (OSError, ValueError, RecursionError):
        return None
    stage = holder.get("stage") if isinstance(holder, dict) else None
    return TOOLS.get(stage) if isinstance(stage, str) else None


def held_by_another(flag: str, folder: str, holder: dict, hint: str = "") -> str:
    who = f"stage {holder.get('stage')}, pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('since')}" \
        if holder.get("pid") else "its lock file does not say which"
    return f"{flag}={folder} is being written by another run ({who}); wait for it to end or choose another folder{hint}"


def _unwritable(flag: str, folder: str, e: OSError) -> str:
    if isinstance(e, (FileExistsError, NotADirectoryError)) or (os.path.exists(folder) and not os.path.isdir(folder)):
        return f"{flag}={folder} is a file, not a folder"
    return f"{flag}={folder}: cannot write there ({e.strerror or e})"


def _not_own(flag: str, folder: str, what: str) -> str:
    return (f"{flag}={folder}: {LOCK_FILE} there {what}, which hardpos did not make and will not write through; "
            f"remove it")


def lock_local(folder: str, holder: dict, flag: str) -> int:
    """Creates the folder and takes its lock; the open lock file's descriptor (closing it releases the lock).
    LockRefused when that cannot be done, before any work is spent."""
    path = os.path.join(folder, LOCK_FILE)
    try:
        os.makedirs(folder, exist_ok=True)
        # O_NOFOLLOW: a link planted at the lock's path would have its target overwritten with our pid
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if os.path.islink(path):
            raise LockRefused(_not_own(flag, folder, f"is a symbolic link (to {os.readlink(path)})")) from None
        raise LockRefused(_unwritable(flag, folder, e)) from None
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:  # a hard link's other names would change too
        os.close(fd)
        raise LockRefused(_not_own(flag, folder, "is not a plain file of its own (a hard link or a device)"))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            other = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
        except (ValueError, RecursionError):  # RecursionError: a record nested past the parser's depth
            other = {}
        other = other if isinstance(other, dict) else {}
        os.close(fd)
        raise LockRefused(held_by_another(flag, folder, other)) from None
    try:  # the folder may allow opening an existing lock file but not creating files
        probe = os.path.join(folder, f".hardpos-write-test-{uuid.uuid4().hex[:8]}")
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        os.remove(probe)
    except OSError as e:
        os.close(fd)
        raise LockRefused(_unwritable(flag, folder, e)) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode("utf-8"), 0)
    return fd


def planted_link(flag: str, folder: str, files=(), folders=(), file_names=None) -> str | None:
    """Why hardpos will not write into `folder`, its own output folder: a symbolic link anywhere in it (hardpos makes
    none and never writes through one: a link at log.jsonl, checkpoints/ or a per-model folder would have the run
    overwrite or delete files anywhere), or one of the entries it writes of the wrong kind (`files` must be regular
    files, `folders` folders, where they exist; so must every entry whose path in the folder `file_names`, a
    compiled pattern, matches whole: the names a run gives its checkpoints and their temporary files). None when
    there is none."""
    if not os.path.isdir(folder):
        return None
    for here, dirs, names in os.walk(folder):
        for name in sorted(dirs + names):
            path = os.path.join(here, name)
            shown = os.path.relpath(path, folder)
            if os.path.islink(path):
                return (f"{flag}={folder}: {shown} is a symbolic link (to {os.readlink(path)}), which hardpos did not "
                        f"make and never writes through; remove it")
            if file_names is not None and file_names.fullmatch(shown.replace(os.sep, "/")) \
                    and not os.path.isfile(path):
                return (f"{flag}={folder}: {shown} is not a file, where hardpos writes a file of that name; move it "
                        f"away")
    for names, wanted, kind in ((files, os.path.isfile, "a file"), (folders, os.path.isdir, "a folder")):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.lexists(path) and not wanted(path):
                return f"{flag}={folder}: {name} is not {kind}, where hardpos writes {kind} {name}; move it away"
    return None


KERNEL_FOLDERS = ("/proc/", "/sys/")  # a device under /dev/ is no regular file: refused as one


# File systems whose files the kernel makes up as they are read (the process's environment, its memory, settings)
KERNEL_FILE_SYSTEMS = frozenset({"proc", "sysfs", "debugfs", "tracefs", "securityfs", "configfs", "cgroup", "cgroup2",
                                 "bpf", "pstore", "efivarfs", "fusectl", "binfmt_misc", "selinuxfs", "mqueue"})
_kernel_mounts: tuple[str, ...] | None = None


def kernel_mounts(mountinfo: str | None = None) -> tuple[str, ...]:
    """Where such file systems are mounted, each ending in "/" (from /proc/self/mountinfo, read once a process;
    `mountinfo`: its text, for a test). A container can mount the host's /proc anywhere (/host/proc)."""
    global _kernel_mounts
    from_file = mountinfo is None
    if from_file and _kernel_mounts is not None:
        return _kernel_mounts
    if from_file:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
                mountinfo = f.read(4 << 20)
        except OSError:
            mountinfo = ""
    found = set(KERNEL_FOLDERS)
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split(" ")
        if len(parts) > 4 and rest.split(" ", 1)[0] in KERNEL_FILE_SYSTEMS:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), parts[4])  # mountinfo's octal escapes
            found.add(point.rstrip("/") + "/")
    mounts = tuple(sorted(found))
    if from_file:
        _kernel_mounts = mounts
    return mounts


def kernel_file(path) -> bool:
    """Whether a local path is (or links to) a file of the kernel's, such as /proc/self/environ: stat calls it a
    regular file of 0 bytes, yet it reads as the process's environment, secrets included. Never data to read. Known
    by where kernel file systems are mounted (/proc and /sys, and any other mount of proc, sysfs, ...)."""
    if has_scheme(str(path)):
        return False
    return (os.path.realpath(path) + "/").startswith(kernel_mounts())


def open_new(path, mode: int = 0o644) -> int:
    """A descriptor of a new file at path, for writing: whatever is at the name is removed first (a link is removed,
    never followed) and the file is made with O_EXCL|O_NOFOLLOW, so a link planted meanwhile fails the open."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def write_own(path, data: bytes) -> None:
    """A file of hardpos's own output folder written whole: beside it first (O_EXCL|O_NOFOLLOW), then renamed over
    it, so a link at its name is replaced, never written through."""
    tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    fd = open_new(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
