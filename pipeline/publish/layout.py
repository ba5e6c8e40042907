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
from pipeline.tables.folders import REPORT_FILE, Table

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
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def write_run_folder(out: Path, schema_name: str, rows: list[dict], folder: str | None = None) -> Path:
    """A run folder as a stage writes it (report.json + <folder>/<split>-00000-of-00001.parquet) holding `rows`
    of the table `schema_name`: for fixtures and benchmarks that need a table without running its stage."""
    from pipeline.io.parquet import write_shard
    from pipeline.io.report import merge_reports
    from pipeline.io.schema import load_schema
    from pipeline.tables.shards import shard_name

    schema = load_schema(schema_name)
    for row in rows:
        schema.check_row(row)
    folder = folder or schema_name
    name = shard_name(schema.split, 0, 1)
    (out / folder).mkdir(parents=True, exist_ok=True)
    sha256 = write_shard(rows, str(out / folder / name), schema)
    section = {"read": len(rows), "rows": len(rows), "discarded": 0, "rejected": 0, "written": len(rows),
               "balanced": True, "discard_reasons": {}, "reject_reasons": {}, "shards": {f"{folder}/{name}": len(rows)},
               "dead_letter_shards": {}, "sha256": {f"{folder}/{name}": sha256}}
    report = merge_reports(None, {"stage": "all", "output_dir": str(out), "inputs": {}, "tables": {folder: section}})
    (out / REPORT_FILE).write_text(json.dumps(report))
    return out
