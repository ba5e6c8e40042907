"""Beam 2.77's DaskRunner, bug by bug: one small pipeline per bug that pipeline/runners/dask_runner.py fixes, for an
upstream report. Each prints OK or WRONG and what it saw; exit 0 when every case asked for is OK.

    python benchmarks/dask_repro.py [CASE ...] --runner=apache_beam.runners.dask.dask_runner.DaskRunner   # WRONG
    python benchmarks/dask_repro.py [CASE ...] --runner=pipeline.runners.dask_runner.DaskRunner           # OK
    python benchmarks/dask_repro.py [CASE ...] --runner=DirectRunner                    # OK (cases 1-4 only)
        [--dask_client_address=tcp://127.0.0.1:8786]    (default: a LocalCluster of worker processes)

CASEs (the fix's number in dask_runner.py's docstring; all by default):
1 tagged_outputs   apache_beam/runners/dask/transform_evaluator.py (ParDo / apply_dofn_to_bundle) returns the
                   values of every receiver, whatever its tag, as the ParDo's one bag, and dask_runner.py
                   (DaskBagVisitor) gives a consumer the bag of the producing transform, not of the PCollection:
                   each output of .with_outputs() holds all of them.
2 leaves           run_pipeline computes only the bag of the last transform visited: a sink applied earlier
                   (a dead-letter writer, a samples file) never runs.
3 finish_bundle    apply_dofn_to_bundle collects a bundle's outputs before invoke_finish_bundle: what a DoFn emits
                   in finish_bundle (BatchElements' last batch) is lost.
4 side_inputs      a side input is materialised inside each consuming task by a nested compute of its whole
                   upstream graph: the upstream steps run once per consuming partition, not once.
5 reshuffle        the Reshuffle override is a no-op: what one element fans out to stays in one partition, so every
                   step after it is one task on one worker.
6 client           DaskRunnerResult.wait_until_finish(duration) raises TimeoutError, and marks the run FAILED, while
                   the run goes on (the contract: return the current state); and it never closes its Client: the
                   LocalCluster a run started (worker processes) lives on until the launcher exits, one more for
                   each pipeline a process runs.
7 create           Create puts up to 128 elements in one partition: a Create of a corpus's read units (a file, a
                   Parquet row group each) is read by one task, which holds every record it reads.

A case records what the pipeline's steps saw in files (a DoFn on a worker process cannot return anything else to
the launcher), one leaf per pipeline, applied last (so that bug 2 does not hide the others).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _write(directory: str, text: str) -> None:
    with open(os.path.join(directory, uuid.uuid4().hex), "w") as f:
        f.write(text)


def _read(directory: str) -> list:
    return sorted((eval(p.read_text()) for p in Path(directory).iterdir()), key=repr)


_results: list = []  # this case's runs: run_case closes the clients that Beam's runner leaves open (bug 6)


def _run(build, runner: str, options: list[str]):
    pipeline = beam.Pipeline(runner, options=PipelineOptions(options))
    build(pipeline)
    result = pipeline.run()
    _results.append(result)
    result.wait_until_finish()
    return result


# --- 1 ----------------------------------------------------------------------------------------------------------

class _Split(beam.DoFn):
    def process(self, n):
        if n % 2:
            yield beam.pvalue.TaggedOutput("odd", {"n": n})  # like hardpos's dead letters: a dict on a tagged output
        else:
            yield (f"file{n}", n)  # like its read counts: a tuple on the main output


def tagged_outputs(runner: str, options: list[str], work: str) -> tuple[bool, str]:
    def build(p):
        split = p | beam.Create(range(4)) | beam.ParDo(_Split()).with_outputs("odd", main="even")
        _ = ((split.even | "E" >> beam.Map(lambda x: ("even", x)), split.odd | "O" >> beam.Map(lambda x: ("odd", x)))
             | beam.Flatten() | beam.Map(lambda x: _write(work, repr(x))))

    _run(build, runner, options)
    got = _read(work)
    want = sorted([("even", ("file0", 0)), ("even", ("file2", 2)), ("odd", {"n": 1}), ("odd", {"n": 3})], key=repr)
    return got == want, f"got {got}"


# --- 2 ----------------------------------------------------------------------------------------------------------

def leaves(runner: str, options: list[str], work: str) -> tuple[bool, str]:
    def build(p):
        numbers = p | beam.Create(range(3))
        _ = numbers | "FirstSink" >> beam.Map(lambda n: _write(work, repr(("first", n))))
        _ = numbers | "LastSink" >> beam.Map(lambda n: _write(work, repr(("last", n))))

    _run(build, runner, options)
    got = _read(work)
    return got == sorted([(s, n) for s in ("first", "last") for n in range(3)], key=repr), f"got {got}"


# --- 3 ----------------------------------------------------------------------------------------------------------

def finish_bundle(runner: str, options: list[str], work: str) -> tuple[bool, str]:
    def build(p):
        batches = p | beam.Create(range(5)) | beam.BatchElements(min_batch_size=100, max_batch_size=100)
        _ = batches | beam.Map(lambda b: _write(work, repr(sorted(b))))

    _run(build, runner, options)
    got = _read(work)
    return sorted(n for b in got for n in b) == list(range(5)), f"batches got {got} (BatchElements emits in " \
                                                                 f"finish_bundle)"


# --- 4 ----------------------------------------------------------------------------------------------------------

def side_inputs(runner: str, options: list[str], work: str) -> tuple[bool, str]:
    def build(p):
        def upstream(n):
            _write(work, repr(("upstream ran", n)))
            return n

        total = beam.pvalue.AsSingleton(p | "One" >> beam.Create([10]) | "Upstream" >> beam.Map(upstream))
        _ = (p | "Many" >> beam.Create(range(4)) | beam.Map(lambda n, t: n + t, total)
             | beam.Map(lambda n: _write(work, repr(("sum", n)))))

    _run(build, runner, [*options, "--dask_npartitions=4"])
    got = _read(work)
    runs = sum(1 for g in got if g[0] == "upstream ran")
    sums = sorted(g[1] for g in got if g[0] == "sum")
    return runs == 1 and sums == [10, 11, 12, 13], f"the side input's upstream step ran {runs} times; sums {sums}"


# --- 5 ----------------------------------------------------------------------------------------------------------

class _Bundle(beam.DoFn):
    """Each element with the id of the bundle (a dask partition: a task) that processed it."""

    def start_bundle(self):
        self.bundle = uuid.uuid4().hex

    def process(self, n):
        yield self.bundle, n


def reshuffle(runner: str, options: list[str], work: str) -> tuple[bool, str]:
    def build(p):
        _ = (p | beam.Create(["one file"]) | beam.FlatMap(lambda _: range(1000)) | beam.Reshuffle()
             | beam.ParDo(_Bundle()) | beam.Map(lambda pair: _write(work, repr(pair))))

    _run(build, runner, options)
    got = _read(work)
    bundles = len({b for b, _ in got})
    return len(got) == 1000 and bundles > 1, f"1,000 records of one read unit processed after Reshuffle in " \
                                             f"{bundles} bundle(s)"


# --- 6 ----------------------------------------------------------------------------------------------------------

def _wait_for(path: str) -> str:
    while not os.path.exists(path):
        time.sleep(0.05)
    return path


def client(runner: str, options: list[str], work: str) -> tuple[bool, str]:
    """The run waits for a file the case writes only once wait_until_finish(duration) has answered: whatever the
    machine's speed, the run is still going when asked."""
    gate = os.path.join(work, "gate")
    pipeline = beam.Pipeline(runner, options=PipelineOptions(options))
    _ = pipeline | beam.Create([gate]) | beam.Map(_wait_for) | beam.Map(lambda p: _write(work, repr(p)))
    result = pipeline.run()
    _results.append(result)
    try:
        early = result.wait_until_finish(duration=100)
    except Exception as e:  # noqa: BLE001  (what Beam's runner raises is the finding)
        early = f"{type(e).__name__} raised"
    finally:
        Path(gate).touch()
    try:
        result.wait_until_finish()
    except Exception as e:  # noqa: BLE001
        return False, f"wait_until_finish(duration) while running: {early}; then {type(e).__name__}"
    status = getattr(getattr(result, "client", None), "status", "no client")
    return early == "RUNNING" and status in ("closed", "no client"), \
        f"wait_until_finish(duration) while running: {early}; after the run its Client is {status!r}"


# --- 7 ----------------------------------------------------------------------------------------------------------

def create(runner: str, options: list[str], work: str) -> tuple[bool, str]:
    def build(p):
        _ = (p | beam.Create([f"part-{i:03}.parquet" for i in range(200)]) | beam.ParDo(_Bundle())
             | beam.Map(lambda pair: _write(work, repr(pair))))

    _run(build, runner, options)
    got = _read(work)
    largest = max(sum(1 for b, _ in got if b == bundle) for bundle in {b for b, _ in got})
    return len(got) == 200 and largest == 1, f"200 read units of a Create: the largest bundle read {largest}"


CASES = {"tagged_outputs": tagged_outputs, "leaves": leaves, "finish_bundle": finish_bundle,
         "side_inputs": side_inputs, "reshuffle": reshuffle, "client": client, "create": create}
CLUSTER_CASES = ("reshuffle", "client", "create")  # a local runner has no tasks to spread nor a client to close


def run_case(name: str, runner: str, options: list[str]) -> tuple[bool, str]:
    try:
        with tempfile.TemporaryDirectory(prefix=f"dask-repro-{name}-") as work:
            return CASES[name](runner, options, work)
    finally:
        while _results:
            client = getattr(_results.pop(), "client", None)
            if client is not None:
                client.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", metavar="CASE", help=" ".join(CASES))
    parser.add_argument("--runner", default="apache_beam.runners.dask.dask_runner.DaskRunner")
    args, options = parser.parse_known_args(argv)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"no such case {unknown[0]!r} (one of {', '.join(CASES)})")
    cases = args.cases or [c for c in CASES if "Dask" in args.runner or c not in CLUSTER_CASES]
    if not args.cases and "Dask" not in args.runner:
        print(f"({', '.join(CLUSTER_CASES)}: about a Dask cluster's tasks and client, not run on {args.runner})")
    failed = 0
    for name in cases:
        ok, seen = run_case(name, args.runner, options)
        failed += not ok
        print(f"{name:>15}: {'OK   ' if ok else 'WRONG'} {seen}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
