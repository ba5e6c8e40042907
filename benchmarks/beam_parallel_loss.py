"""A minimal reproduction of elements that Beam's local runner loses with more than one worker (Beam 2.77).

    .venv/bin/python benchmarks/beam_parallel_loss.py

With --direct_num_workers above 1 (multi_threading or multi_processing) the FnApiRunner's ParallelBundleManager
runs each worker's part of a bundle and merges the parts' responses into a new one that keeps only their metrics
and error (fn_runner.py, ParallelBundleManager.process_bundle): the parts' `residual_roots` are dropped. A
splittable DoFn that checkpoints (defer_remainder, or a ProcessContinuation) leaves the rest of its restriction
there, so the rest is never processed, and the run ends DONE, exit 0. Here 4 restrictions of 100 numbers, 10 per
call: 400 elements with one worker, 40 with two.

hardpos's pipelines have no splittable DoFn that checkpoints, so this is not the loss docs/full-size.md records
(seen only while the runner held the data itself; not seen since the spill files); it is a loss of the same runner
in the same mode, and the reason hardpos counts every table and refuses one that does not balance.
"""
from __future__ import annotations

import sys

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.core import RestrictionProvider

RESTRICTIONS, SIZE, PER_CALL = 4, 100, 10


class UpTo(RestrictionProvider):
    def initial_restriction(self, n):
        return OffsetRange(0, n)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, n, restriction):
        return restriction.size()


class Numbers(beam.DoFn):
    """0..n-1, PER_CALL per call, then a checkpoint: the rest of the restriction becomes a residual root."""

    def process(self, n, tracker=beam.DoFn.RestrictionParam(UpTo())):
        position = tracker.current_restriction().start
        for _ in range(PER_CALL):
            if not tracker.try_claim(position):
                return
            yield position
            position += 1
        tracker.defer_remainder()


def count(flags: list[str]) -> int:
    """The elements that reached the step after Numbers, as the runner's own counter says."""
    counter = beam.metrics.Metrics.counter("repro", "elements")
    p = beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner", *flags]))
    _ = p | beam.Create([SIZE] * RESTRICTIONS) | beam.ParDo(Numbers()) | beam.Map(lambda _: counter.inc())
    result = p.run()
    result.wait_until_finish()
    found = result.metrics().query(MetricsFilter().with_name("elements"))["counters"]
    return sum(c.committed for c in found)


def main() -> int:
    expected = RESTRICTIONS * SIZE
    lost = False
    for flags in (["--direct_num_workers=1"],
                  ["--direct_num_workers=2", "--direct_running_mode=multi_threading"],
                  ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]):
        n = count(flags)
        lost |= n != expected
        print(f"{' '.join(flags)}: {n:,} of {expected:,} elements")
    print("Beam's multi-worker local runner lost elements" if lost else "no elements lost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
