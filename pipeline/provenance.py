"""Which hardpos made a file: its version and git commit, recorded in every report.json and in the dataset card."""
from __future__ import annotations

import functools
import os
import subprocess
from importlib import metadata
from pathlib import Path

COMMIT_ENV = "HARDPOS_GIT_COMMIT"  # set where the code has no .git beside it (the Docker image: a build arg)


@functools.lru_cache(maxsize=1)
def build_info() -> dict:
    """{"version": the installed hardpos version, "git_commit": the commit of the checkout it runs from, with
    "-dirty" when tracked files differ from it, or HARDPOS_GIT_COMMIT, else None}."""
    try:
        version = metadata.version("hardpos")
    except metadata.PackageNotFoundError:
        version = None
    return {"version": version, "git_commit": os.environ.get(COMMIT_ENV) or _git_commit()}


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        def git(*args):
            return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30,
                                  check=True).stdout.strip()

        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("-dirty" if dirty else "")


def describe() -> str:
    info = build_info()
    commit = info["git_commit"] or "commit unknown"
    return f"hardpos {info['version'] or '(version unknown)'} ({commit})"
