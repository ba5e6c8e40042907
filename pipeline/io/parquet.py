"""Schema-checked Parquet sinks whose files depend only on the rows, never on sharding or worker order."""
from __future__ import annotations

import hashlib
import io
import json
import pickle
import posixpath
import re
import zlib
from collections.abc import Iterable
from itertools import groupby

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipeline.io.schema import TableSchema

ROW_GROUP_SIZE = 10_000  # small row groups let the Hub viewer and readers seek without reading whole shards
# pyarrow's reader option that checks every page's CRC: read_table below, and the published card's configs (so
# `datasets.load_dataset` checks them too; pipeline/publish/card.py).
VERIFY_PAGES = {"page_checksum_verification": True}
SHARD_NAME = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.parquet$")


def shard_name(prefix: str, index: int, num_shards: int) -> str:
    return f"{prefix}-{index:05d}-of-{num_shards:05d}.parquet"


def shard_pattern(directory: str, prefix: str) -> str:
    return FileSystems.join(directory, f"{prefix}-?????-of-?????.parquet")


def num_shards_for(rows: int, rows_per_shard: int) -> int:
    return max(1, -(-rows // rows_per_shard))


def _shard_of(value: str, num_shards: int) -> int:
    return zlib.crc32(value.encode("utf-8", "surrogatepass")) % num_shards


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
    streaming loads no split of 0 rows at all, so publish/load.py's load_table builds that one itself."""
    ordered = _in_order(rows, schema.sort_by)
    arrow_schema = schema.arrow()
    buffer = io.BytesIO()
    with pq.ParquetWriter(buffer, arrow_schema, write_page_checksum=True) as writer:
        for start in range(0, len(ordered), ROW_GROUP_SIZE):
            chunk = [pickle.loads(data) for data in ordered[start:start + ROW_GROUP_SIZE]]
            writer.write_table(pa.Table.from_pylist(chunk, schema=arrow_schema), row_group_size=ROW_GROUP_SIZE)
            ordered[start:start + ROW_GROUP_SIZE] = [b""] * len(chunk)  # let the written rows go
    return buffer.getvalue()


def write_shard(rows: list[dict], path: str, schema: TableSchema) -> str:
    """Writes the shard; returns its sha256, which the run report records."""
    data = shard_bytes(rows, schema)
    with FileSystems.create(path) as sink:
        sink.write(data)
    return hashlib.sha256(data).hexdigest()


def read_table(source, **kwargs) -> pa.Table:
    """pq.read_table that checks every page's checksum: a flipped bit is an error, not another value."""
    return pq.read_table(source, **VERIFY_PAGES, **kwargs)


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with FileSystems.open(path, compression_type="uncompressed") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class _Counted:
    """The grouped rows of a shard, read once, lazily (never copied into a list), counting the real rows (not the
    None that makes an empty shard exist)."""

    def __init__(self, rows: Iterable[dict | None]):
        self.rows, self.n = rows, 0

    def __iter__(self):
        for row in self.rows:
            if row is not None:
                self.n += 1
                yield row


class WriteParquetTable(beam.PTransform):
    """Rows -> <directory>/<prefix>-SSSSS-of-NNNNN.parquet.

    The shard count follows from the row count, a row's shard from a hash of its `shard_by` column, and rows
    are sorted inside a shard: the same rows give byte-identical files. Every shard is written, even empty,
    so a table with no rows still has its schema (and load_table loads it, publish/load.py). Outputs (path, rows written, sha256) per shard, the
    path relative to the directory's parent (<folder>/<name>), as the report lists it.
    """

    def __init__(self, directory: str, schema: TableSchema, prefix: str | None = None,
                 rows_per_shard: int = 100_000, shard_by: str = "example_id"):
        super().__init__()
        self.directory = directory
        self.schema = schema
        self.prefix = prefix or schema.split
        self.rows_per_shard = rows_per_shard
        self.shard_by = shard_by

    def expand(self, rows):
        num_shards = (
            rows
            | "CountRows" >> beam.combiners.Count.Globally()
            | "NumShards" >> beam.Map(num_shards_for, self.rows_per_shard)
        )
        shards = beam.pvalue.AsSingleton(num_shards)
        keyed = rows | "KeyByShard" >> beam.Map(lambda r, n, col: (_shard_of(r[col], n), r), shards, self.shard_by)
        every_shard = num_shards | "EveryShard" >> beam.FlatMap(lambda n: [(i, None) for i in range(n)])
        return (
            (keyed, every_shard)
            | "Flatten" >> beam.Flatten()
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.Map(self._write, shards)
        )

    def _write(self, shard, num_shards):
        index, rows = shard
        counted = _Counted(rows)
        path = FileSystems.join(self.directory, shard_name(self.prefix, index, num_shards))
        sha256 = write_shard(counted, path, self.schema)
        relative = posixpath.join(posixpath.basename(self.directory.rstrip("/")), posixpath.basename(path))
        return relative, counted.n, sha256
