"""A table's Parquet shards with pyarrow alone: their names, their bytes (the same rows give the same bytes), reading
them with every page's checksum checked, and the sha256 of a local file. The Beam sink (pipeline/io/parquet.py) writes
with these; load_table, the trainer and the evaluator read with them, on a machine without Beam."""
from __future__ import annotations

import hashlib
import io
import json
import pickle
import re
from collections.abc import Iterable
from itertools import groupby

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.io.schema import TableSchema

ROW_GROUP_SIZE = 10_000  # small row groups let the Hub viewer and readers seek without reading whole shards
# pyarrow's reader option that checks every page's CRC: read_table below, and the published card's configs (so
# `datasets.load_dataset` checks them too; pipeline/publish/card.py).
VERIFY_PAGES = {"page_checksum_verification": True}
SHARD_NAME = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.parquet$")


def shard_name(prefix: str, index: int, num_shards: int) -> str:
    return f"{prefix}-{index:05d}-of-{num_shards:05d}.parquet"


def shard_glob(prefix: str) -> str:
    """The file pattern of every shard of `prefix`, whatever their count."""
    return f"{prefix}-?????-of-?????.parquet"


def _row_text(row: dict) -> str:
    return json.dumps(row, sort_keys=True, ensure_ascii=True, default=repr)


def _in_order(rows: Iterable[dict], sort_by: tuple[str, ...]) -> list[bytes]:
    """The rows, pickled, sorted by the schema's sort_by, and rows with equal keys (e.g. the dead letters of one
    record) by their whole content: the order never depends on the order they arrived in. Pickled as they arrive
    (a shard's rows are a few hundred bytes each so, against a few KB as dicts), so a 100,000-row shard is not
    held as dicts."""
    keyed = sorted(((tuple(r[c] for c in sort_by), pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL))
                    for r in rows if r is not None), key=lambda item: item[0])
    ordered = []
    for _, same in groupby(keyed, key=lambda item: item[0]):
        same = [data for _, data in same]
        if len(same) > 1:
            same.sort(key=lambda data: _row_text(pickle.loads(data)))
        ordered += same
    return ordered


def shard_bytes(rows: Iterable[dict], schema: TableSchema) -> bytes:
    """The Parquet file of these rows, with page checksums (a reader with page_checksum_verification finds a
    damaged page). Built one row group at a time: only ROW_GROUP_SIZE rows are dicts and Arrow at once. No rows
    give the schema and no row group, which pyarrow and `datasets` streaming read as 0 rows (a row group of 0 rows
    would stop `datasets`: it reads in batches of the first row group's size); `datasets.load_dataset` without
    streaming loads no split of 0 rows at all, so load_table (tables/load.py) builds that one itself."""
    ordered = _in_order(rows, schema.sort_by)
    arrow_schema = schema.arrow()
    buffer = io.BytesIO()
    with pq.ParquetWriter(buffer, arrow_schema, write_page_checksum=True) as writer:
        for start in range(0, len(ordered), ROW_GROUP_SIZE):
            chunk = [pickle.loads(data) for data in ordered[start:start + ROW_GROUP_SIZE]]
            writer.write_table(pa.Table.from_pylist(chunk, schema=arrow_schema), row_group_size=ROW_GROUP_SIZE)
            ordered[start:start + ROW_GROUP_SIZE] = [b""] * len(chunk)  # let the written rows go
    return buffer.getvalue()


def read_table(source, **kwargs) -> pa.Table:
    """pq.read_table that checks every page's checksum: a flipped bit is an error, not another value."""
    return pq.read_table(source, **VERIFY_PAGES, **kwargs)


def stream_sha256(f) -> str:
    """The sha256 of what an open binary file holds from where it stands, read in 1 MB pieces."""
    digest = hashlib.sha256()
    while chunk := f.read(1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: str) -> str:
    """A local file's sha256 (the report and the manifest record those of local files)."""
    with open(path, "rb") as f:
        return stream_sha256(f)
