"""Issue 15, the commit protocol: a run writes into a staging folder and commits only when it is done, under a
lock; stages sharing an output folder keep each other's tables and report sections; a run that fails or is
killed leaves the earlier result as it was, and no shard that looks complete."""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from pipeline.run import main
from pipeline.stages import eval_sets
from pipeline.tables.folders import PublishError, find_tables
from tests.conftest import REPO, VL_SAMPLE, eval_sets_args, one_error_line, report, run_cli, visible_files
from tests.llm_fixtures import SAMPLE_CAPTIONS, CompletionsServer


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipeline.run", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.fixture(scope="module")
def many_records(tmp_path_factory) -> Path:
    """The VL-CheckList sample, each file 20 times over: with --rows_per_shard=1, about 800 shards to write."""
    root = tmp_path_factory.mktemp("many") / "vl"
    for path in VL_SAMPLE.rglob("*.json"):
        target = root / path.relative_to(VL_SAMPLE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(json.loads(path.read_text()) * 20))
    return root


@pytest.fixture(scope="module")
def killed_rerun(tmp_path_factory, many_records):
    """A complete run, then a re-run of it SIGKILLed while it writes its shards (one row per shard)."""
    out = tmp_path_factory.mktemp("killed") / "out"
    assert main(eval_sets_args(out, many_records, None, "--progress_seconds=0")) == 0
    before = visible_files(out)
    proc = start(*eval_sets_args(out, many_records, None, "--rows_per_shard=1", "--progress_seconds=0"))

    def new_shards():  # the re-run's shards, wherever it writes them (one row each: not -of-00001)
        return [p for p in out.rglob("*-of-*.parquet") if not p.name.endswith("-of-00001.parquet")]

    deadline = time.monotonic() + 120
    while proc.poll() is None and len(new_shards()) < 20 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, "the re-run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(new_shards()) >= 20  # it was killed in the middle of writing its shards
    return out, before


def test_case2_a_killed_rerun_leaves_the_earlier_result_in_place(killed_rerun):
    out, before = killed_rerun
    assert visible_files(out) == before  # every table, dead letter, sample and report byte for byte
    # The earlier tables still check out; publish names the killed run until it is cleared or allowed.
    assert {t.config for t in find_tables(out, allow_partial=True)} == {"replace_eval"}
    with pytest.raises(PublishError, match="a run that has not finished"):
        find_tables(out)


def test_case5_a_run_killed_while_writing_shards_leaves_no_shard_that_looks_complete(killed_rerun, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(killed_rerun[0], out)
    visible = glob.glob(str(out / "**" / "*.parquet"), recursive=True)
    assert visible and all(p.endswith("-of-00001.parquet") for p in visible)  # only the complete earlier run's
    assert ds.dataset(out / "replace").count_rows() == report(out)["tables"]["replace"]["rows"]
    staged = list(out.glob(".staging-*"))
    assert len(staged) == 1 and not (staged[0] / "commit.json").exists()
    # The next run into the folder clears what the killed one staged.
    assert main(eval_sets_args(out, VL_SAMPLE, None, "--progress_seconds=0")) == 0
    assert not list(out.glob(".staging-*"))


def test_case2_a_rerun_that_fails_leaves_the_earlier_result_in_place(sample_output, tmp_path, monkeypatch):
    out = tmp_path / "out"
    shutil.copytree(sample_output, out)
    before = visible_files(out)

    def fails(self, record):
        raise RuntimeError("a bug half way through the run")

    monkeypatch.setattr(eval_sets.MakeSwapRows, "make_row", fails)
    with pytest.raises(Exception, match="a bug half way through the run"):
        main(eval_sets_args(out))
    assert visible_files(out) == before
    assert not list(out.glob(".staging-*"))


def test_case2_stages_sharing_an_output_dir_keep_each_others_tables_and_reports(tmp_path):
    out = tmp_path / "shared"
    assert main(eval_sets_args(out)) == 0
    eval_files = {k: v for k, v in visible_files(out).items() if not k.startswith("report.")}
    assert main(["--stage=order_eval", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={out}"]) == 0
    shared = report(out)
    assert {name: t["stage"] for name, t in shared["tables"].items()} == {
        "replace": "eval_sets", "swap": "eval_sets", "order_eval": "order_eval"}
    after = visible_files(out)
    assert {k: after[k] for k in eval_files} == eval_files  # eval_sets' shards and dead letters untouched
    assert {"order_eval/test-00000-of-00001.parquet", "rejected/order_eval-00000-of-00001.parquet"} <= set(after)
    assert {t.config for t in find_tables(out)} == {"replace_eval", "swap_eval", "order_eval"}
    assert "| order_eval |" in (out / "report.md").read_text() and "| swap |" in (out / "report.md").read_text()
    # eval_sets again, with one source: its other table and order_eval's stay, with their report sections
    assert main(eval_sets_args(out, VL_SAMPLE, None)) == 0
    again = report(out)
    assert list(again["tables"]) == ["replace", "swap", "order_eval"]
    assert again["tables"]["order_eval"] == shared["tables"]["order_eval"]
    assert again["tables"]["swap"] == shared["tables"]["swap"]


def test_case3_a_second_run_into_a_busy_folder_is_refused_with_one_line(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    with CompletionsServer(gated=True, stop_after=240) as server:
        first = start("--stage=hard_positives", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={out}",
                      f"--cache_dir={cache}", "--llm_engine=openai", "--model=stub", "--positive_checks=rules",
                      f"--llm_base_url={server.base_url}", "--progress_seconds=0")
        try:
            assert server.asked.wait(180), "the first run never asked its model"
            second = run_cli(*eval_sets_args(out))  # a real second process, into the same folder
            assert first.poll() is None  # the first was still running all along: the two overlapped
        finally:
            server.release()
            _, first_err = first.communicate(timeout=300)
    line = one_error_line(second)
    assert "is being written by another run (stage hard_positives" in line and str(out) in line
    assert first.returncode == 0, first_err
    assert set(report(out)["tables"]) == {"hard_positives"}  # the second wrote nothing


def test_case14_an_output_path_that_is_a_file_or_cannot_be_written_fails_before_any_work(tmp_path):
    a_file = tmp_path / "out.txt"
    a_file.write_text("mine")
    line = one_error_line(run_cli(*eval_sets_args(a_file)))
    assert line == f"error: --output_dir={a_file} is a file, not a folder"
    assert a_file.read_text() == "mine"
    read_only = "/sys/hardpos-test-out"  # sysfs refuses new entries even to root
    line = one_error_line(run_cli(*eval_sets_args(read_only)))
    assert line.startswith(f"error: --output_dir={read_only}: cannot write there")
    if os.geteuid() != 0:  # a read-only folder (root writes into those anyway)
        folder = tmp_path / "read_only"
        folder.mkdir(mode=0o555)
        assert "cannot write there" in one_error_line(run_cli(*eval_sets_args(folder)))


def test_a_lock_held_by_a_dead_run_does_not_block_and_an_interrupted_commit_is_finished(tmp_path):
    from pipeline.io.commit import FolderLock, new_staging, recover
    from pipeline.options import UsageError

    out = tmp_path / "out"
    holder = subprocess.run([sys.executable, "-c", f"""
import os, signal
from pipeline.io.commit import FolderLock
with FolderLock({str(out)!r}, "eval_sets"):
    os.kill(os.getpid(), signal.SIGKILL)
"""], cwd=REPO)
    assert holder.returncode == -signal.SIGKILL
    assert (out / ".hardpos.lock").exists()
    with FolderLock(str(out), "eval_sets"):  # a SIGKILLed holder's lock is free
        with pytest.raises(UsageError, match="being written by another run"):
            FolderLock(str(out), "order_eval").__enter__()
        # A run that died after deciding to commit: the next one finishes its commit.
        staging = new_staging(str(out), "eval_sets")
        (Path(staging) / "replace").mkdir()
        (Path(staging) / "replace" / "test-00000-of-00001.parquet").write_bytes(b"shard")
        stage_report = {"stage": "eval_sets", "output_dir": str(out), "inputs": {},
                        "tables": {"replace": {"read": 0, "rows": 0, "emitted": 0, "discarded": 0, "rejected": 0,
                                               "balanced": True}}}
        (Path(staging) / "commit.json").write_text(json.dumps({"reports": [stage_report],
                                                              "files": ["replace/test-00000-of-00001.parquet"]}))
        assert recover(str(out)) == [f"finished the interrupted commit of --stage=eval_sets in {out}"]
    assert (out / "replace" / "test-00000-of-00001.parquet").read_bytes() == b"shard"
    assert report(out)["tables"]["replace"]["stage"] == "eval_sets"
    assert not list(out.glob(".staging-*"))
