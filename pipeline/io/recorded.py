"""The tables a run folder's report.json records, read back through Beam's FileSystems (local or gs://): train_set
and the images stage use a shard only once its bytes have the sha256 that the report recorded when it was written.
Parquet's page checksums do not cover the page headers (a flipped bit there changed rows with no error), and a
shard that another run's commit swapped in passes them all."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from apache_beam.io.filesystems import FileSystems

from pipeline.io.report import REPORT_FILE, read_json
from pipeline.tables.folders import (
    PublishError,
    changed_file,
    check_real_files,
    local_parquet_files,
    recorded_shards,
    report_problem,
)
from pipeline.urls import has_scheme


@dataclass(frozen=True)
class RecordedTable:
    report_path: str        # the report.json that records the table
    section: dict           # the table's section of it
    shards: dict[str, str]  # each shard's path -> the sha256 recorded for it


def recorded_sections(folder: str) -> dict[str, dict]:
    """The table sections of folder's report.json ({} when there is none); PublishError when it is unreadable."""
    report_path = FileSystems.join(folder, REPORT_FILE)
    if not FileSystems.exists(report_path):
        return {}
    try:
        report = read_json(report_path)
    except ValueError as e:  # not JSON, not UTF-8
        raise PublishError(f"{report_path}: unreadable report ({type(e).__name__}: {str(e).splitlines()[0]}); run "
                           f"the stage again") from None
    problem = report_problem(report)
    if problem:
        raise PublishError(f"{report_path}: not a hardpos report ({problem}); run the stage again")
    return report.get("tables", {})


def recorded_table(folder: str, table: str) -> RecordedTable | None:
    """The table `table` as the report.json of `folder` records it; None when there is no report or it records no
    such table, PublishError (one line) when the report is unreadable or the shards in the folder are not the ones
    it lists."""
    section = recorded_sections(folder).get(table)
    if section is None:
        return None
    prefix = folder.rstrip("/") + "/"

    local = not has_scheme(folder)

    def parquet_files(sub: str) -> list[str]:
        if local:  # links not followed: a table folder that is one is refused
            return local_parquet_files(Path(folder), sub)
        found = FileSystems.match([FileSystems.join(folder, sub, "*.parquet")])[0].metadata_list
        return [m.path[len(prefix):].replace("\\", "/") for m in found]

    shards = recorded_shards(folder.rstrip("/"), table, section, parquet_files)
    if local:  # a shard that is a link (to anywhere) is read by no stage of ours
        check_real_files(Path(folder), [Path(folder) / relative for relative in shards])
    return RecordedTable(FileSystems.join(folder, REPORT_FILE), section,
                         {FileSystems.join(folder, relative): sha256 for relative, sha256 in shards.items()})


def read_recorded(path: str, sha256: str, report_path: str) -> bytes:
    """The shard's bytes, once they have the sha256 that report_path recorded for them (PublishError naming the
    file otherwise)."""
    with FileSystems.open(path, compression_type="uncompressed") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise changed_file(path, report_path)
    return data
