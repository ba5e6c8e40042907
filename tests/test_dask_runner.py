"""pipeline.runners.dask_runner: Beam's DaskRunner with its translation bugs fixed (see benchmarks/dask_repro.py).
Skipped where dask[distributed] is not installed."""
import pytest

pytest.importorskip("dask.distributed")

import apache_beam as beam  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from pipeline.options import unknown_flags  # noqa: E402

RUNNER = "pipeline.runners.dask_runner.DaskRunner"


def test_the_runners_own_flags_are_known():
    for runner in (RUNNER, "apache_beam.runners.dask.dask_runner.DaskRunner"):
        assert unknown_flags([f"--runner={runner}", "--dask_client_address=tcp://127.0.0.1:8786"]) == []


class _Split(beam.DoFn):
    def process(self, n):
        yield beam.pvalue.TaggedOutput("odd", {"n": n}) if n % 2 else (f"f{n}", n)


def _record(x, path):
    with open(path / repr(x).replace("/", "_"), "w"):
        pass


def test_tagged_outputs_finish_bundle_outputs_side_inputs_and_every_leaf(tmp_path):
    leaf, last = tmp_path / "leaf", tmp_path / "last"
    leaf.mkdir(), last.mkdir()
    with beam.Pipeline(RUNNER, options=PipelineOptions(["--dask_npartitions=1"])) as p:
        split = p | beam.Create(range(6)) | beam.ParDo(_Split()).with_outputs("odd", main="even")
        total = beam.pvalue.AsSingleton(split.even | beam.combiners.Count.Globally())
        _ = split.odd | "Leaf" >> beam.Map(lambda x, t, d: _record(("odd", x["n"], t), d), total, leaf)
        batches = (split.even, split.odd) | beam.Flatten() | beam.BatchElements(min_batch_size=100)
        _ = batches | beam.FlatMap(lambda b: b) | "Last" >> beam.Map(_record, last)
    assert sorted(f.name for f in leaf.iterdir()) == ["('odd', 1, 3)", "('odd', 3, 3)", "('odd', 5, 3)"]
    assert sorted(f.name for f in last.iterdir()) == sorted(
        [repr((f"f{n}", n)) for n in (0, 2, 4)] + [repr({"n": n}) for n in (1, 3, 5)])
