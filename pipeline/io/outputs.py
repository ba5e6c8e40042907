"""Everything one table of a stage writes: schema-checked rows, dead letters, and the counts for the report."""
from __future__ import annotations

from typing import Callable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from pipeline.io.dead_letters import DISCARDED, REJECTED, dead_letter
from pipeline.io.dead_letters import SCHEMA as DEAD_LETTER_SCHEMA
from pipeline.io.parquet import WriteParquetTable
from pipeline.io.progress import Tick
from pipeline.io.schema import SchemaViolation, TableSchema, load_schema
from pipeline.perturb.outcomes import Reject


class _CheckSchema(beam.DoFn):
    """Rows that do not fit the schema are dead letters, not a crash in the sink."""

    def __init__(self, stage: str, table: str, schema: TableSchema):
        self.stage, self.table, self.schema = stage, table, schema
        self.bad = Metrics.counter(f"{stage}.{table}", "schema_violation")

    def process(self, row):
        try:
            self.schema.check_row(row)
        except SchemaViolation as e:
            self.bad.inc()
            yield beam.pvalue.TaggedOutput(REJECTED, dead_letter(
                self.stage, self.table, row.get("source", ""), row.get("source_file", ""),
                row.get("source_index", -1), Reject("schema_violation", str(e)), row))
            return
        yield row


def _parts(letters) -> tuple:
    """Dead letters given as one PCollection or several."""
    return tuple(letters) if isinstance(letters, (list, tuple)) else (letters,)


def _count_rows(row, table: str, group: Callable[[dict], tuple] | None):
    yield ("rows", table, row["source_file"]), 1
    if group:
        yield ("group", table, *group(row)), 1


def _count_dead(letter, table: str):
    yield ("dead", table, letter["source_file"], letter["kind"], letter["reason"]), 1


def _count_shard(written, table: str, kind: str):
    path, rows, sha256 = written
    yield (kind, table, path), rows
    yield ("sha256", table, path, sha256), 1


class WriteTableOutputs(beam.PTransform):
    """Rows, dead letters and read counts of one table -> Parquet files; outputs (count key, n) for the report.

    Input: {"rows", "read" (file, records in file), "rejected", "discarded"}, one PCollection each (the dead
    letters may be several), and
    optionally "emitted" (the source_file of each record that gave rows) where a record gives several rows.
    Writes <output_dir>/<table>/<split>-*.parquet against schemas/<schema>.json and
    <output_dir>/{rejected,discarded}/<table>-*.parquet against schemas/dead_letters.json.
    `row_counts`, when given, is a PTransform from the rows the sink writes (those that passed the schema check)
    to more (count key, n) pairs: a figure of the table as written (train_set's separability).
    """

    def __init__(self, stage: str, table: str, schema: str, output_dir: str, rows_per_shard: int,
                 group: Callable[[dict], tuple] | None = None, row_counts: beam.PTransform | None = None):
        super().__init__()
        self.stage, self.table, self.output_dir = stage, table, output_dir
        self.schema = load_schema(schema)
        self.rows_per_shard = rows_per_shard
        self.group = group
        self.row_counts = row_counts

    def expand(self, inputs):
        checked = inputs["rows"] | "CheckSchema" >> beam.ParDo(
            _CheckSchema(self.stage, self.table, self.schema)).with_outputs(REJECTED, main="rows")
        _ = checked.rows | "ProgressRows" >> beam.ParDo(Tick(self.table, "rows"))
        written = checked.rows | "WriteRows" >> WriteParquetTable(
            FileSystems.join(self.output_dir, self.table), self.schema, rows_per_shard=self.rows_per_shard)
        counts = [
            inputs["read"] | "CountRead" >> beam.Map(lambda file_n, t: (("read", t, file_n[0]), file_n[1]), self.table),
            checked.rows | "CountRows" >> beam.FlatMap(_count_rows, self.table, self.group),
            written | "CountShards" >> beam.FlatMap(_count_shard, self.table, "shard"),
        ]
        if self.row_counts is not None:
            counts.append(checked.rows | "CountWrittenRows" >> self.row_counts)
        if "emitted" in inputs:
            _ = inputs["emitted"] | "ProgressEmitted" >> beam.ParDo(Tick(self.table, "emitted"))
            counts.append(
                inputs["emitted"] | "CountEmitted" >> beam.Map(lambda f, t: (("emitted", t, f), 1), self.table))
        dead_schema = load_schema(DEAD_LETTER_SCHEMA)
        for kind, letters in ((REJECTED, (*_parts(inputs[REJECTED]), checked[REJECTED])),
                              (DISCARDED, _parts(inputs[DISCARDED]))):
            for i, part in enumerate(letters):  # per part, not after a Flatten: the ticks come as the letters do,
                # and a local runner keeps a Flatten's inputs whole
                _ = part | f"Progress{kind.title()}{i}" >> beam.ParDo(Tick(self.table, kind))
                counts.append(part | f"Count{kind.title()}{i or ''}" >> beam.FlatMap(_count_dead, self.table))
            dead_written = letters | f"Write{kind.title()}" >> WriteParquetTable(
                FileSystems.join(self.output_dir, kind), dead_schema, prefix=self.table,
                rows_per_shard=self.rows_per_shard, shard_by="record_key")
            counts.append(dead_written | f"Count{kind.title()}Shards" >> beam.FlatMap(
                _count_shard, self.table, "dead_letter_shard"))
        # summed where they are made: a count per row would otherwise cross the runner as one element each
        summed = [c | f"Sum{i}" >> beam.CombinePerKey(sum) for i, c in enumerate(counts)]
        return summed | "AllCounts" >> beam.Flatten()
