"""The tables a run wrote, found from its report.json files, and their place in a Hub dataset repository.

A run folder holds report.json and <folder>/<split>-SSSSS-of-NNNNN.parquet per table. Published, each table
is one config: data/<config>/<split>-SSSSS-of-NNNNN.parquet, where <config> is the table's schema name
(replace_eval, swap_eval, train_negatives, order_eval, hard_positives, train). The report says which shards
the run wrote and how many rows each holds; a folder whose files disagree (a shard missing, a stale one
left, another row count) is refused, because the card's counts would be wrong.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

REPORT_FILE = "report.json"
# Stages whose reports describe Parquet tables in the run folder (images and publish reports do not).
TABLE_STAGES = ("eval_sets", "train_negatives", "order_eval", "hard_positives", "train_set", "all")
SHARD = re.compile(r"^(?P<split>[a-z]+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.parquet$")


class PublishError(ValueError):
    """The run folder cannot be published as it is; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Table:
    config: str              # schema name, the Hub config
    split: str
    run_dir: Path            # folder of the report.json that wrote it
    stage_report: dict       # that whole report (inputs, other tables)
    section: dict            # the table's section of the report
    files: tuple[Path, ...]  # shards, in order
    rows: int                # from the Parquet footers
    download_size: int       # bytes on disk
    schema: object           # pyarrow.Schema of the shards

    def arrow_bytes(self) -> int:
        """Size in memory as Arrow (the card's num_bytes / dataset_size): reads every shard whole, so only the
        card asks for it, not the checks and loaders that find tables."""
        return sum(pq.read_table(path).nbytes for path in self.files)

    def hub_paths(self) -> list[str]:
        return [f"data/{self.config}/{f.name}" for f in self.files]

    def data_files_pattern(self) -> str:
        """Matches exactly this set of shards (the -of-NNNNN suffix), so a stale shard of an earlier upload
        with another shard count is never read with them."""
        return f"data/{self.config}/{self.split}-*-of-{len(self.files):05d}.parquet"


def find_reports(output_dir: Path) -> list[Path]:
    """report.json of the folder itself and of its subfolders (a folder per stage, as `make sample` writes)."""
    candidates = [output_dir / REPORT_FILE] + sorted(output_dir.glob(f"*/{REPORT_FILE}"))
    return [p for p in candidates if p.is_file()]


def _read_table(run_dir: Path, report: dict, name: str, section: dict) -> Table:
    shards = section.get("shards") or {}
    if not shards:
        raise PublishError(f"{run_dir / REPORT_FILE}: table {name} lists no shards")
    folders = {Path(rel).parent for rel in shards}
    if len(folders) != 1:
        raise PublishError(f"{run_dir / REPORT_FILE}: table {name} has shards in several folders")
    folder = run_dir / folders.pop()
    listed = {run_dir / rel: n for rel, n in shards.items()}
    on_disk = {p for p in folder.glob("*.parquet")}
    missing = sorted(set(listed) - on_disk)
    stale = sorted(on_disk - set(listed))
    if missing or stale:
        which = f"missing {missing[0]}" if missing else f"not in the report {stale[0]}"
        raise PublishError(f"{folder}: shards do not match {run_dir / REPORT_FILE} ({which}); run the stage again")
    files = tuple(sorted(listed))
    splits = set()
    rows = size = 0
    config = schema = None
    for path in files:
        match = SHARD.match(path.name)
        if not match or int(match["count"]) != len(files):
            raise PublishError(f"{path}: not a shard name of the form <split>-SSSSS-of-{len(files):05d}.parquet")
        splits.add(match["split"])
        meta = pq.ParquetFile(path)
        n = meta.metadata.num_rows
        if n != listed[path]:
            raise PublishError(f"{path}: {n} rows, but the report says {listed[path]}; run the stage again")
        table_name = (meta.schema_arrow.metadata or {}).get(b"hardpos.table", b"").decode()
        if not table_name:
            raise PublishError(f"{path}: no hardpos.table in the Parquet metadata (not written by hardpos)")
        if config not in (None, table_name) or (schema is not None and not schema.equals(meta.schema_arrow)):
            raise PublishError(f"{path}: its schema differs from the table's other shards")
        config, schema = table_name, meta.schema_arrow
        rows += n
        size += path.stat().st_size
    if len(splits) != 1:
        raise PublishError(f"{folder}: shards of several splits {sorted(splits)}")
    return Table(config=config, split=splits.pop(), run_dir=run_dir, stage_report=report, section=section,
                 files=files, rows=rows, download_size=size, schema=schema)


def find_tables(output_dir: str | Path) -> list[Table]:
    """Every table written under output_dir, in config-name order; PublishError when there is none, when two
    runs wrote the same table, or when a table's files disagree with its report."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        raise PublishError(f"--output_dir {output_dir} is not a local folder")
    found: dict[str, Table] = {}
    for report_path in find_reports(output_dir):
        try:
            report = json.loads(report_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise PublishError(f"{report_path}: unreadable report ({e})") from None
        if report.get("stage") not in TABLE_STAGES:
            continue
        for name, section in report.get("tables", {}).items():
            table = _read_table(report_path.parent, report, name, section)
            if table.config in found:
                raise PublishError(f"table {table.config} was written by two runs: {found[table.config].run_dir} "
                                   f"and {table.run_dir}; point --output_dir at a folder holding one of each")
            found[table.config] = table
    if not found:
        raise PublishError(f"no tables under {output_dir}: expected report.json with Parquet tables there or in "
                           f"its subfolders (run a stage first)")
    return [found[c] for c in sorted(found)]


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
    if dest.exists():
        dest.unlink()
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def write_run_folder(out: Path, schema_name: str, rows: list[dict], folder: str | None = None) -> Path:
    """A run folder as a stage writes it (report.json + <folder>/<split>-00000-of-00001.parquet) holding `rows`
    of the table `schema_name`: for fixtures and benchmarks that need a table without running its stage."""
    from pipeline.io.parquet import shard_name, write_shard
    from pipeline.io.schema import load_schema

    schema = load_schema(schema_name)
    for row in rows:
        schema.check_row(row)
    folder = folder or schema_name
    name = shard_name(schema.split, 0, 1)
    (out / folder).mkdir(parents=True, exist_ok=True)
    write_shard(rows, str(out / folder / name), schema)
    section = {"read": len(rows), "rows": len(rows), "discarded": 0, "rejected": 0, "written": len(rows),
               "balanced": True, "discard_reasons": {}, "reject_reasons": {}, "shards": {f"{folder}/{name}": len(rows)}}
    (out / REPORT_FILE).write_text(json.dumps({"stage": "all", "output_dir": str(out), "inputs": {},
                                               "tables": {folder: section}}))
    return out
