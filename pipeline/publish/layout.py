"""The tables a run wrote, placed in a Hub dataset repository: data/<config>/<split>-SSSSS-of-NNNNN.parquet per
table, where <config> is the table's schema name. Finding and checking the tables (and a published folder's
manifest) is pipeline/tables/folders.py's, which reads them without Beam.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq

# stages/publish.py imports these from here.
from pipeline.tables.folders import MANIFEST, NEXT, PublishError, find_tables, read_manifest  # noqa: F401
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


def place(src: Path, dest: Path) -> None:
    """A hard link when on the same disk (no copy of a multi-GB table), else a copy."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(dest):
        dest.unlink()  # the name only: a link left there is not followed
    if src.is_symlink():  # find_tables refuses them: never published, as a link or through one
        raise PublishError(f"{src}: a symbolic link, which publish never publishes")
    try:
        os.link(src, dest, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dest, follow_symlinks=False)


