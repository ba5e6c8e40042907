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
    """A leaf that counts the elements of a PCollection as `what` ("rows", "discarded", "cached", ...) of `table`;
    with `size`, an element counts size(element) (a cache hit answers all the prompts that share its text)."""

    def __init__(self, table: str, what: str, size=None):
        self.table, self.what, self.size = table, what, size
        self.counter = Metrics.counter(NAMESPACE, f"{table}.{what}")

    def setup(self):
        self._sink = _ProcessTally.get()

    def process(self, element):
        n = self.size(element) if self.size else 1
        self.counter.inc(n)
        if self._sink:
            self._sink.add(self.table, self.what, n)

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

    def add(self, table: str, what: str, n: int = 1) -> None:
        self.counts[f"{table}\t{what}"] += n
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


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def _done_of(done: int, total: int, unit: str, span: float) -> str:
    rate = done / span
    eta = f", ETA {_duration((total - done) / rate)}" if done and done < total else ""
    return f"{done:,}/{total:,} {unit} ({done / total:.0%}, {rate:,.1f}/s{eta})"


def format_progress(totals: Counter, elapsed: float, since: dict[str, float] | None = None,
                    expected: dict[str, tuple] | None = None, stage: str = "progress") -> str:
    """One line for the stage running now. Per table: what is done of its units of account (rows, or records that
    gave rows where one gives several, plus dead letters) against the total where it is known, with the rate
    since the table's first tick and an ETA. An LLM table (expected (total, unit, prompts)) counts its prompts
    answered, from the cache or generated, against its prompts, since its rows come only once a caption's answers
    are all in; then the answers accepted. With `expected` ({table: (total, unit[, prompts])}) only those tables
    are shown: a chain's finished stages are not."""
    tables: dict[str, Counter] = {table: Counter() for table in expected or {}}
    for key, n in totals.items():
        table, what = key.split("\t")
        tables.setdefault(table, Counter())[what] += n
    parts = []
    for table, c in tables.items():
        if expected is not None and table not in expected:
            continue
        span = max(elapsed - (since or {}).get(table, 0.0), 1e-3)
        dead = c["discarded"] + c["rejected"]
        done = (c["emitted"] or c["rows"]) + dead
        total, unit, prompts = (((expected or {}).get(table) or (None, "")) + (0,))[:3]  # None: not known
        answered = c["cached"] + c["generated"]
        if prompts and answered < prompts:
            part = (f"{table} {_done_of(answered, prompts, 'prompts answered', span)}: {c['cached']:,} cached, "
                    f"{c['generated']:,} generated, {c['accepted']:,} accepted; {c['rows']:,} rows")
        elif total:
            part = f"{table} {_done_of(min(done, total), total, unit, span)}: {c['rows']:,} rows"
        else:
            part = f"{table} {c['rows']:,} rows ({c['rows'] / span:,.1f}/s)"
        if dead:
            part += f" +{dead:,} dead letters"
        if answered and not (prompts and answered < prompts):
            part += f"; prompts {c['cached']:,} cached, {c['generated']:,} generated, {c['accepted']:,} accepted"
        parts.append(part)
    return f"[{stage} {elapsed:6.1f}s] " + (" | ".join(parts) if parts else "starting")


class ProgressPrinter:
    """Context manager for a local run: sets HARDPOS_PROGRESS_DIR and prints a line every `seconds` about the stage
    running now (ProgressPrinter.focus names it and its tables' totals). Inside another one (--stage=all's chain of
    pipelines) it does nothing: the outer printer follows each pipeline of the chain in turn. On a terminal the
    line is rewritten in place; elsewhere (a log, CI) each update is a line of its own."""

    _active: ProgressPrinter | None = None  # the printer running in this process

    def __init__(self, seconds: float, stream=None):
        self.seconds = seconds
        self.stream = stream or sys.stderr
        self.directory = None
        self._stop = threading.Event()
        self._thread = None
        self._previous_env = None
        self._lock = threading.Lock()
        self._stage, self._expected, self._stage_started = "progress", None, 0.0
        self._in_place = False

    @classmethod
    def focus(cls, stage: str, expected: dict[str, tuple[int, str]] | None) -> None:
        """The stage now running and {table: (total units, unit name)} of the tables it writes (None: unknown)."""
        printer = cls._active
        if printer is None:
            return
        with printer._lock:
            printer._end_line()
            printer._stage, printer._expected, printer._stage_started = stage, expected, time.monotonic()

    def __enter__(self):
        if self.seconds <= 0 or ProgressPrinter._active is not None:
            return self
        ProgressPrinter._active = self
        import tempfile

        self._tmp = tempfile.TemporaryDirectory(prefix="hardpos-progress-")
        self.directory = self._tmp.name
        self._previous_env = os.environ.get(PROGRESS_DIR_ENV)
        os.environ[PROGRESS_DIR_ENV] = self.directory
        self.started = self._stage_started = time.monotonic()
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._thread = threading.Thread(target=self._loop, name="hardpos-progress", daemon=True)
        self._thread.start()
        return self

    def _loop(self):
        last, last_print, since = None, 0.0, {}
        while not self._stop.wait(self.seconds):
            totals = read_totals(self.directory)
            with self._lock:
                elapsed = time.monotonic() - self._stage_started
                for key in totals:
                    since.setdefault(key.split("\t")[0], time.monotonic() - self._stage_started - self.seconds)
                # a line when counts move, and a heartbeat every HEARTBEAT_SECONDS while they do not (a model
                # loading, a first batch generating); nothing before the first tick where no totals are known (a
                # remote runner's workers never tick here: their counters are polled)
                if (totals or self._expected) and (totals != last or elapsed - last_print >= HEARTBEAT_SECONDS):
                    self._show(format_progress(totals, elapsed, since, self._expected, self._stage))
                    last, last_print = totals, elapsed

    def _show(self, line: str) -> None:
        if self._tty:
            self.stream.write("\r\033[K" + line)
            self._in_place = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def _end_line(self) -> None:
        if self._in_place:
            self.stream.write("\n")
            self.stream.flush()
            self._in_place = False

    def __exit__(self, *exc):
        if self._thread is None:
            return False
        ProgressPrinter._active = None
        self._stop.set()
        self._thread.join()
        self._end_line()
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
