"""Schema-checked Parquet sinks whose files depend only on the rows, never on sharding or worker order. The shards'
names and bytes come from pipeline/tables/shards.py (Beam-free, so readers need no Beam); here Beam writes them."""
from __future__ import annotations

import hashlib
import posixpath
import zlib
from collections.abc import Iterable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.io.schema import TableSchema
from pipeline.tables.shards import VERIFY_PAGES  # noqa: F401  (stages/ import it from here)
from pipeline.tables.shards import shard_bytes, shard_glob, shard_name


def shard_pattern(directory: str, prefix: str) -> str:
    return FileSystems.join(directory, shard_glob(prefix))


def num_shards_for(rows: int, rows_per_shard: int) -> int:
    return max(1, -(-rows // rows_per_shard))


def _shard_of(value: str, num_shards: int) -> int:
    return zlib.crc32(value.encode("utf-8", "surrogatepass")) % num_shards


def write_shard(rows: list[dict], path: str, schema: TableSchema) -> str:
    """Writes the shard; returns its sha256, which the run report records."""
    data = shard_bytes(rows, schema)
    with FileSystems.create(path) as sink:
        sink.write(data)
    return hashlib.sha256(data).hexdigest()


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
    so a table with no rows still has its schema (and load_table loads it, tables/load.py). Outputs (path, rows
    written, sha256) per shard, the path relative to the directory's parent (<folder>/<name>), as the report lists it.
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
