"""Schema-checked Parquet sinks whose files depend only on the rows, never on sharding or worker order. The shards'
names and bytes come from pipeline/tables/shards.py (Beam-free, so readers need no Beam); here Beam writes them."""
from __future__ import annotations

import hashlib
import posixpath
import zlib
from collections.abc import Iterable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.io import spill
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


def _pieces_by_shard(path: str, num_shards: int, shard_by: str, folder: str):
    """A spill file of rows -> (shard, path of a file of its rows of that shard) per shard it has rows of."""
    writers = {}
    for row in spill.read_file(path):
        index = _shard_of(row[shard_by], num_shards)
        if index not in writers:
            writers[index] = spill.Writer(f"{folder}/pieces", f"shard{index}")
        writers[index].add(row)
    for index, writer in sorted(writers.items()):
        yield index, writer.close()


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
        """`rows`: a PCollection, or several (their Flatten, which a spilling run never holds whole)."""
        parts = list(rows) if isinstance(rows, (list, tuple)) else [rows]
        counted = [p | f"CountRows{i or ''}" >> beam.combiners.Count.Globally() for i, p in enumerate(parts)]
        num_shards = (
            (counted | "AllCounts" >> beam.Flatten() if len(counted) > 1 else counted[0])
            | "SumCounts" >> beam.CombineGlobally(sum)
            | "NumShards" >> beam.Map(num_shards_for, self.rows_per_shard)
        )
        shards = beam.pvalue.AsSingleton(num_shards)
        every_shard = num_shards | "EveryShard" >> beam.FlatMap(lambda n: [(i, None) for i in range(n)])
        if spill.directory() is None:
            rows = parts | "FlattenRows" >> beam.Flatten() if len(parts) > 1 else parts[0]
            keyed = rows | "KeyByShard" >> beam.Map(lambda r, n, col: (_shard_of(r[col], n), r), shards,
                                                    self.shard_by)
            return (
                (keyed, every_shard)
                | "Flatten" >> beam.Flatten()
                | "GroupByShard" >> beam.GroupByKey()
                | "WriteShard" >> beam.Map(self._write, shards)
            )
        # the rows go to files as they come; once their count is known each file is cut into a piece per shard,
        # and a shard's writer reads its pieces: only paths cross the runner
        files = spill.spill_each(parts, "Rows")
        pieces = files | "PiecesByShard" >> beam.FlatMap(_pieces_by_shard, shards, self.shard_by,
                                                         spill.directory())
        return (
            (pieces, every_shard)
            | "FlattenPieces" >> beam.Flatten()
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.Map(self._write_pieces, shards)
        )

    def _write_pieces(self, shard, num_shards):
        index, pieces = shard
        paths = sorted(p for p in pieces if p is not None)
        return self._write((index, (row for path in paths for row in spill.read_file(path))), num_shards)

    def _write(self, shard, num_shards):
        index, rows = shard
        counted = _Counted(rows)
        path = FileSystems.join(self.directory, shard_name(self.prefix, index, num_shards))
        sha256 = write_shard(counted, path, self.schema)
        relative = posixpath.join(posixpath.basename(self.directory.rstrip("/")), posixpath.basename(path))
        return relative, counted.n, sha256
