"""Progress while a pipeline runs: rows and dead letters per table so far, and their rate.

Beam's DirectRunner reports metrics only once the pipeline has finished, so the ticks travel another way:
each worker process sums its ticks and rewrites one small JSON file in a local folder (named by
HARDPOS_PROGRESS_DIR, which the launcher sets and multi-process workers inherit), and a thread in the
launcher adds the files up and prints a line every few seconds. Every tick is also a Beam counter, so
runners with live metrics (Dataflow) show the same figures in their UI and in the launcher's poll.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics import Metrics

PROGRESS_DIR_ENV = "HARDPOS_PROGRESS_DIR"
NAMESPACE = "hardpos.progress"
_FLUSH_SECONDS = 0.5
HEARTBEAT_SECONDS = 30.0


class Tick(beam.DoFn):
    """A leaf that counts the elements of a PCollection as `what` ("rows", "discarded", ...) of `table`."""

    def __init__(self, table: str, what: str):
        self.table, self.what = table, what
        self.counter = Metrics.counter(NAMESPACE, f"{table}.{what}")

    def setup(self):
        self._sink = _ProcessTally.get()

    def process(self, element):
        self.counter.inc()
        if self._sink:
            self._sink.add(self.table, self.what)

    def finish_bundle(self):
        if self._sink:
            self._sink.flush()


class _ProcessTally:
    """One per worker process: its ticks so far, rewritten to <dir>/<process id>.json now and then."""

    _instance: _ProcessTally | None = None
    _lock = threading.Lock()

    def __init__(self, directory: Path):
        self.path = directory / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
        self.counts: Counter = Counter()
        self.last_flush = 0.0

    @classmethod
    def get(cls) -> _ProcessTally | None:
        directory = os.environ.get(PROGRESS_DIR_ENV)
        if not directory:
            return None
        with cls._lock:
            if cls._instance is None or cls._instance.path.parent != Path(directory):
                cls._instance = cls(Path(directory))
            return cls._instance

    def add(self, table: str, what: str) -> None:
        self.counts[f"{table}\t{what}"] += 1
        if time.monotonic() - self.last_flush > _FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            self.last_flush = time.monotonic()
            tmp = self.path.with_suffix(".tmp")
            try:
                tmp.write_text(json.dumps(self.counts))
                os.replace(tmp, self.path)  # readers never see half a file
            except OSError:
                pass  # progress is best effort; the run's report does the accounting


def read_totals(directory: str) -> Counter:
    totals: Counter = Counter()
    for path in Path(directory).glob("*.json"):
        try:
            totals.update(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return totals


def format_progress(totals: Counter, elapsed: float, since: dict[str, float] | None = None) -> str:
    """One line: per table, rows so far with their rate (since the table's first row when `since` gives
    that time, else since the start) and dead letters so far."""
    tables: dict[str, Counter] = {}
    for key, n in totals.items():
        table, what = key.split("\t")
        tables.setdefault(table, Counter())[what] += n
    parts = []
    for table, c in tables.items():
        span = elapsed - (since or {}).get(table, 0.0)
        dead = c["discarded"] + c["rejected"]
        part = f"{table} {c['rows']:,} rows ({c['rows'] / max(span, 1e-3):,.1f}/s)"
        if dead:
            part += f" +{dead:,} dead letters"
        parts.append(part)
    return f"[progress {elapsed:6.1f}s] " + (" | ".join(parts) if parts else "starting")


class ProgressPrinter:
    """Context manager for a local run: sets HARDPOS_PROGRESS_DIR and prints a line every `seconds`. Inside another
    one (--stage=all's chain of pipelines) it does nothing: the outer printer counts every pipeline's rows, so
    the lines keep growing from stage to stage instead of starting again at zero."""

    _active = 0  # printers running in this process

    def __init__(self, seconds: float, stream=None):
        self.seconds = seconds
        self.stream = stream or sys.stderr
        self.directory = None
        self._stop = threading.Event()
        self._thread = None
        self._previous_env = None

    def __enter__(self):
        if self.seconds <= 0 or ProgressPrinter._active:
            return self
        ProgressPrinter._active += 1
        import tempfile

        self._tmp = tempfile.TemporaryDirectory(prefix="hardpos-progress-")
        self.directory = self._tmp.name
        self._previous_env = os.environ.get(PROGRESS_DIR_ENV)
        os.environ[PROGRESS_DIR_ENV] = self.directory
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="hardpos-progress", daemon=True)
        self._thread.start()
        return self

    def _loop(self):
        last, last_print, since = None, 0.0, {}
        while not self._stop.wait(self.seconds):
            totals = read_totals(self.directory)
            elapsed = time.monotonic() - self.started
            for key in totals:
                since.setdefault(key.split("\t")[0], elapsed - self.seconds)
            # a line when counts move, and a heartbeat every HEARTBEAT_SECONDS while they do not; nothing
            # before the first tick (a remote runner's workers never tick here: their counters are polled)
            if totals and (totals != last or elapsed - last_print >= HEARTBEAT_SECONDS):
                print(format_progress(totals, elapsed, since), file=self.stream, flush=True)
                last, last_print = totals, elapsed

    def __exit__(self, *exc):
        if self._thread is None:
            return False
        ProgressPrinter._active -= 1
        self._stop.set()
        self._thread.join()
        if self._previous_env is None:
            os.environ.pop(PROGRESS_DIR_ENV, None)
        else:
            os.environ[PROGRESS_DIR_ENV] = self._previous_env
        self._tmp.cleanup()
        return False


def poll_metrics(result, seconds: float, stream=None) -> None:
    """For runners whose run() returns while the job runs (Dataflow): print the progress counters until done."""
    stream = stream or sys.stderr
    started = time.monotonic()
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.runners.runner import PipelineState

    while not PipelineState.is_terminal(result.state):
        result.wait_until_finish(duration=int(max(seconds, 1) * 1000))
        try:
            counters = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
        except Exception:  # some runners cannot query while running; the final report still comes
            continue
        totals = Counter({"\t".join(c.key.metric.name.rsplit(".", 1)): c.committed or c.attempted or 0
                          for c in counters})
        print(format_progress(totals, time.monotonic() - started), file=stream, flush=True)
