"""Schema-checked Parquet sinks whose files depend only on the rows, never on sharding or worker order."""
from __future__ import annotations

import posixpath
import zlib

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipeline.io.schema import TableSchema

ROW_GROUP_SIZE = 10_000  # small row groups let the Hub viewer and readers seek without reading whole shards


def shard_name(prefix: str, index: int, num_shards: int) -> str:
    return f"{prefix}-{index:05d}-of-{num_shards:05d}.parquet"


def shard_pattern(directory: str, prefix: str) -> str:
    return FileSystems.join(directory, f"{prefix}-?????-of-?????.parquet")


def num_shards_for(rows: int, rows_per_shard: int) -> int:
    return max(1, -(-rows // rows_per_shard))


def _shard_of(value: str, num_shards: int) -> int:
    return zlib.crc32(value.encode("utf-8", "surrogatepass")) % num_shards


def write_shard(rows: list[dict], path: str, schema: TableSchema) -> None:
    rows = sorted(rows, key=lambda r: tuple(r[c] for c in schema.sort_by))
    table = pa.Table.from_pylist(rows, schema=schema.arrow())
    with FileSystems.create(path) as sink:
        pq.write_table(table, sink, row_group_size=ROW_GROUP_SIZE)


class WriteParquetTable(beam.PTransform):
    """Rows -> <directory>/<prefix>-SSSSS-of-NNNNN.parquet.

    The shard count follows from the row count, a row's shard from a hash of its `shard_by` column, and rows
    are sorted inside a shard: the same rows give byte-identical files. Every shard is written, even empty,
    so a table with no rows still loads with its schema. Outputs (path, rows written) per shard.
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
        rows = [r for r in rows if r is not None]
        path = FileSystems.join(self.directory, shard_name(self.prefix, index, num_shards))
        write_shard(rows, path, self.schema)
        return posixpath.join(posixpath.basename(self.directory.rstrip("/")), posixpath.basename(path)), len(rows)
