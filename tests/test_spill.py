"""Big PCollections through files (pipeline/io/spill.py): the same results as Beam's own shuffles, byte for byte,
and nothing big left for the local runner to hold."""
from __future__ import annotations

import hashlib
import json
import os
import re

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.testing.util import assert_that, equal_to

from pipeline.io import spill
from pipeline.io.parquet import WriteParquetTable
from pipeline.io.schema import load_schema
from pipeline.options import FnApiDirectRunner
from pipeline.run import STAGES, _spill_folder, main, parse
from tests.test_corpus import records


def _run(build, folder):
    with spill.spilling(folder):
        with beam.Pipeline(runner=FnApiDirectRunner()) as p:
            build(p)


def test_spill_and_groupings_give_what_beams_own_transforms_give(tmp_path):
    pairs = [(f"k{i % 37}", i) for i in range(2_000)]
    expected_groups = {}
    for k, v in pairs:
        expected_groups.setdefault(k, []).append(v)
    expected = sorted((k, sorted(v)) for k, v in expected_groups.items())

    for folder in (None, str(tmp_path / "spill")):
        def build(p):
            pcoll = p | beam.Create(pairs)
            grouped = (spill.group_by_key(pcoll, "Group", partitions=5)
                       | "SortG" >> beam.Map(lambda kv: (kv[0], sorted(kv[1]))))
            assert_that(grouped, equal_to(expected), label="grouped")
            co = (spill.co_group_by_key({"a": pcoll, "b": pcoll | beam.Map(lambda kv: (kv[0], -kv[1]))}, "Co",
                                        partitions=3)
                  | "SortC" >> beam.Map(lambda kv: (kv[0], sorted(kv[1]["a"]), sorted(-v for v in kv[1]["b"]))))
            assert_that(co, equal_to([(k, v, v) for k, v in expected]), label="cogrouped")
            back = spill.unspill(spill.spill(pcoll, "Plain"), "Plain")
            assert_that(back, equal_to(pairs), label="unspilled")
            both = spill.unspill(spill.spill_each([pcoll, p | "More" >> beam.Create([("z", 0)])], "Each"), "Each")
            assert_that(both, equal_to(pairs + [("z", 0)]), label="each")
        _run(build, folder)
    assert os.listdir(tmp_path / "spill")  # the spilling run wrote files (the runner removes the folder)


def _shards(folder):
    return {f: hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in sorted(os.listdir(folder))}


def test_a_table_written_through_files_is_byte_identical(tmp_path):
    schema = load_schema("dead_letters")
    rows = [{"stage": "s", "table": "t", "source": "captions", "source_file": f"f{i % 3}", "source_index": i,
             "record_key": f"k{i:05d}", "kind": "rejected", "reason": "bad", "detail": "x" * (i % 7),
             "record": json.dumps({"i": i})} for i in range(1_050)]
    rows = [{c: r.get(c) for c in schema.column_names} for r in rows]
    for name, folder in (("memory", None), ("files", str(tmp_path / "spill"))):
        def build(p):
            parts = (p | "A" >> beam.Create(rows[:600]), p | "B" >> beam.Create(rows[600:]))
            _ = parts | WriteParquetTable(str(tmp_path / name / "t"), schema, prefix="t", rows_per_shard=100,
                                          shard_by="record_key")
        _run(build, folder)
    memory, files = _shards(tmp_path / "memory" / "t"), _shards(tmp_path / "files" / "t")
    assert len(memory) == 11 and list(memory) == list(files)
    assert memory == files
    assert sum(pq.read_metadata(tmp_path / "files" / "t" / f).num_rows for f in files) == 1_050


def test_a_run_spilling_writes_what_a_run_in_memory_writes(tmp_path):
    """--stage=all on a corpus of several files (the key dedup, the statistics, the rule passes and the join all go
    through files): every table and dead letter byte-identical to --spill_dir=off; the spill folder is removed."""
    rows = records(40, 0, failed={5})
    rows[7]["key"] = rows[3]["key"]  # a repeated key: a dead letter either way
    for i, part in enumerate((rows[:25], rows[25:])):
        pq.write_table(pa.Table.from_pylist(part), tmp_path / f"{i:05d}.parquet", row_group_size=6)
    spill_root = tmp_path / "spill_root"
    for name, flag in (("memory", "--spill_dir=off"), ("files", f"--spill_dir={spill_root}")):
        assert main(["--stage=all", f"--captions={tmp_path}/*.parquet", f"--output_dir={tmp_path / name}",
                     "--progress_seconds=0", "--rows_per_shard=7", flag]) == 0
    memory = {p.relative_to(tmp_path / "memory"): p.read_bytes() for p in (tmp_path / "memory").rglob("*.parquet")}
    files = {p.relative_to(tmp_path / "files"): p.read_bytes() for p in (tmp_path / "files").rglob("*.parquet")}
    assert len(memory) > 10 and memory.keys() == files.keys()
    assert [k for k in memory if memory[k] != files[k]] == []
    assert list(spill_root.iterdir()) == []

    # what the local runner keeps between its stages, in each pipeline of the chain: with spill files nothing
    # that grows with the captions; with --spill_dir=off, the records, rows and rule items themselves
    flags = [f"--captions={tmp_path}/*.parquet", f"--output_dir={tmp_path / 'files'}"]
    for stage in ("train_negatives", "hard_positives", "train_set"):
        big = [c for c in crossings([f"--stage={stage}", *flags]) if not SMALL.search(c)]
        assert big == [], (stage, big)
        held = [c for c in crossings([f"--stage={stage}", *flags, "--spill_dir=off"]) if not SMALL.search(c)]
        assert held, stage


# What may cross a stage boundary of the local runner in a spilling run: spill files' paths and pieces, combiner
# accumulators and their sums, shard counts, read units and shard lists, and the rejected records of the read.
SMALL = re.compile(r"Spilled|AllFiles|Join\w+Files|FlattenPieces|ByPartition|GroupByShard|Reshuffle|"
                   r"CombinePerKey|/Group$|/UnKey$|InjectDefault$|NumShards$|Counts$|AllUnits$|RuleAllowances$|"
                   r"WithDuplicates$")


def crossings(argv: list[str]) -> list[str]:
    """The transforms whose output the FnApiRunner keeps in the launcher between two stages of this graph (a
    multi-input Flatten, a grouping, a wait on a side input), as Beam 2.77 fuses it."""
    from apache_beam.runners.portability.fn_api_runner import translations
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
    from apache_beam.runners.worker import bundle_processor

    options, opts = parse(argv)
    pipeline = beam.Pipeline(options=options)
    folder = _spill_folder(opts, options)
    with spill.spilling(folder):
        STAGES[opts.stage].build(pipeline, opts)
    if folder:
        spill.remove_folder(folder)
    proto = pipeline.to_runner_api()
    names = {tid: t.unique_name for tid, t in proto.components.transforms.items()}
    producer = {out: t.unique_name for t in proto.components.transforms.values() if not t.subtransforms
                for out in t.outputs.values()}
    _, stages = FnApiRunner().create_stages(proto)
    found = set()
    for stage in stages:
        for t in stage.transforms:
            if t.spec.urn == bundle_processor.DATA_OUTPUT_URN:
                _, name = translations.split_buffer_id(t.spec.payload)
                found.add(producer.get(name) or names.get(name, name))
    return sorted(found)
