"""Progress while a pipeline runs: ticks from the workers, the launcher's lines, the metrics poll."""
import io
import re
import time
from collections import Counter

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.io.progress import NAMESPACE, ProgressPrinter, Tick, format_progress, poll_metrics
from tests.conftest import run_cli


def test_format_shows_rows_rate_and_dead_letters_per_table():
    totals = Counter({"train\trows": 1200, "train\trejected": 3, "train\tdiscarded": 2, "swap\trows": 10})
    line = format_progress(totals, 12.0, {"train": 2.0})
    assert line.startswith("[progress   12.0s] ")
    assert "train 1,200 rows (120.0/s) +5 dead letters" in line
    assert "swap 10 rows (0.8/s)" in line
    assert format_progress(Counter(), 1.0).endswith("starting")


class Slow(beam.DoFn):
    def process(self, x):
        time.sleep(0.01)
        yield x


def test_lines_arrive_while_the_pipeline_is_still_running():
    stream = io.StringIO()
    with ProgressPrinter(0.1, stream):
        with beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner"])) as p:
            rows = p | beam.Create(list(range(200))) | beam.ParDo(Slow())
            _ = rows | beam.ParDo(Tick("demo", "rows"))
    counts = [int(n.replace(",", "")) for n in re.findall(r"demo (\d[\d,]*) rows", stream.getvalue())]
    assert counts and counts[0] < 200, stream.getvalue()
    assert counts == sorted(counts)


def test_no_lines_when_turned_off():
    stream = io.StringIO()
    with ProgressPrinter(0, stream):
        with beam.Pipeline() as p:
            _ = p | beam.Create([1, 2]) | beam.ParDo(Tick("demo", "rows"))
    assert stream.getvalue() == ""


class FakeRunningResult:
    """A remote job: running for two polls, then done; its counters grow."""

    class Counter:
        def __init__(self, name, n):
            self.key = type("K", (), {"metric": type("M", (), {"name": name})()})()
            self.committed, self.attempted = n, n

    def __init__(self):
        self.polls = 0

    @property
    def state(self):
        return "DONE" if self.polls >= 2 else "RUNNING"

    def wait_until_finish(self, duration=None):
        self.polls += 1

    def metrics(self):
        outer = self

        class Query:
            def query(self, flt):
                assert NAMESPACE in str(vars(flt))
                return {"counters": [FakeRunningResult.Counter("train.rows", 100 * outer.polls)]}

        return Query()


def test_remote_runs_are_followed_through_their_counters():
    stream = io.StringIO()
    poll_metrics(FakeRunningResult(), 0.01, stream)
    lines = stream.getvalue().splitlines()
    assert [re.search(r"train (\d+) rows", line).group(1) for line in lines] == ["100", "200"]


def test_a_known_total_gives_done_of_total_rate_eta_and_prompt_counts():
    totals = Counter({"hard_positives\temitted": 30, "hard_positives\trows": 41, "hard_positives\tdiscarded": 10,
                      "hard_positives\tcached": 5, "hard_positives\tgenerated": 15})
    line = format_progress(totals, 20.0, {"hard_positives": 0.0}, {"hard_positives": (200, "captions")},
                           "hard_positives")
    # 40 of 200 captions done (30 gave rows, 10 dead letters) in 20 s: 2/s, 160 left: 80 s
    assert line.startswith("[hard_positives   20.0s] ")
    assert "hard_positives 40/200 captions (20%, 2.0/s, ETA 1m20s): 41 rows +10 dead letters" in line
    assert "prompts 5 cached, 15 generated" in line


def test_only_the_running_stage_is_shown_not_a_finished_one():
    totals = Counter({"train_negatives\trows": 205, "train_negatives\trejected": 5, "hard_positives\trows": 3})
    line = format_progress(totals, 1326.7, {}, {"hard_positives": (100, "captions")}, "hard_positives")
    assert "train_negatives" not in line and "hard_positives 3/100 captions" in line
    # before its first tick, the stage's total is still shown (0 done)
    assert "hard_positives 0/100" in format_progress(Counter(), 3.0, {}, {"hard_positives": (100, "captions")})


def test_not_a_terminal_gives_one_line_per_update_and_the_focused_stage():
    stream = io.StringIO()  # not a TTY
    with ProgressPrinter(0.05, stream):
        ProgressPrinter.focus("demo_stage", {"demo": (200, "records")})
        with beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner"])) as p:
            _ = p | beam.Create(list(range(200))) | beam.ParDo(Slow()) | beam.ParDo(Tick("demo", "rows"))
    text = stream.getvalue()
    assert "\r" not in text and "\033" not in text
    lines = text.splitlines()
    assert lines and all(line.startswith("[demo_stage ") for line in lines), text
    done = [int(m.group(1).replace(",", "")) for m in (re.search(r"demo ([\d,]+)/200", line) for line in lines) if m]
    assert done == sorted(done) and len(done) == len(lines)


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_the_line_is_rewritten_in_place():
    stream = FakeTTY()
    with ProgressPrinter(0.05, stream):
        ProgressPrinter.focus("demo_stage", {"demo": (200, "records")})
        with beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner"])) as p:
            _ = p | beam.Create(list(range(200))) | beam.ParDo(Slow()) | beam.ParDo(Tick("demo", "rows"))
    text = stream.getvalue()
    assert text.count("\r\033[K") >= 1 and text.endswith("\n") and text.count("\n") == 1


def test_an_llm_table_counts_its_prompts_answered_until_they_are_all_in():
    totals = Counter({"hard_positives\tcached": 4, "hard_positives\tgenerated": 6, "hard_positives\taccepted": 3,
                      "hard_positives\tdiscarded": 2})
    expected = {"hard_positives": (23, "prompts + captions", 13)}
    line = format_progress(totals, 10.0, {"hard_positives": 0.0}, expected, "hard_positives")
    # 10 of 13 prompts answered in 10 s: 1/s, 3 left
    assert "hard_positives 10/13 prompts answered (77%, 1.0/s, ETA 3s): 4 cached, 6 generated, 3 accepted; 0 rows" \
        in line, line
    totals.update({"hard_positives\tgenerated": 3, "hard_positives\temitted": 8, "hard_positives\trows": 9,
                   "hard_positives\trejected": 11})
    line = format_progress(totals, 20.0, {"hard_positives": 0.0}, expected, "hard_positives")
    assert "hard_positives 21/23 prompts + captions (91%, 1.1/s, ETA 1s): 9 rows +13 dead letters; prompts 4 cached, " \
        "9 generated, 3 accepted" in line, line


def test_accepted_answers_are_counted_as_they_come(tmp_path):
    """Validation runs in the step that made the answers, so a progress line shows answers accepted while the
    model is still answering (they stayed 0 until its last batch when a Flatten came first)."""
    from tests.llm_fixtures import SAMPLE_CAPTIONS, CompletionsServer

    with CompletionsServer(delay=0.25) as server:
        done = run_cli("--stage=hard_positives", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={tmp_path / 'o'}",
                       "--llm_engine=openai", "--model=stub", f"--llm_base_url={server.base_url}",
                       "--positive_types=replace", "--llm_batch_size=2", "--llm_concurrency=1",
                       "--progress_seconds=0.5")
    assert done.returncode == 0, done.stderr[-3000:]
    counts = [tuple(int(n) for n in m.groups()) for m in
              re.finditer(r"hard_positives (\d+)/(\d+) prompts answered .*?(\d+) generated, (\d+) accepted",
                          done.stderr)]
    assert any(0 < accepted and answered < total for answered, total, _, accepted in counts), counts
