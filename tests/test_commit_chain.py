"""Issue 27, the chain (F14): --stage=all commits its tables together, for one set of options, or leaves the
earlier complete set."""
from __future__ import annotations

import shutil

import pytest

import pipeline.run
from pipeline.run import main
from tests.conftest import REPO, report, visible_files

CAPTIONS = REPO / "samples" / "coco" / "captions_sample.json"
REPLAY = REPO / "samples" / "coco" / "hard_positives_replay.jsonl"


def chain_args(out, cache, *extra: str) -> list[str]:
    return ["--stage=all", f"--coco_captions={CAPTIONS}", "--llm_engine=replay", f"--llm_replay={REPLAY}",
            "--model=m", f"--cache_dir={cache}", f"--output_dir={out}", "--progress_seconds=0", *extra]


@pytest.fixture(scope="module")
def seed0(tmp_path_factory):
    base = tmp_path_factory.mktemp("seed0")
    assert main(chain_args(base / "out", base / "cache")) == 0
    return base


@pytest.mark.parametrize("failing", ["hard_positives", "train_set"])
def test_f14_a_chain_that_fails_part_way_leaves_the_earlier_complete_set(seed0, tmp_path, monkeypatch, failing):
    """A --seed=1 rerun into a good seed-0 folder whose second or third stage does not balance: 9d14726 had
    committed the stages before it, leaving tables of two seeds (train rows whose hard_negative is not in
    train_negatives) and a card saying seed 1."""
    out = tmp_path / "out"
    shutil.copytree(seed0 / "out", out)
    before = visible_files(out)
    monkeypatch.setattr(pipeline.run, "report_balanced", lambda stage_report: stage_report["stage"] != failing)
    assert main(chain_args(out, seed0 / "cache", "--seed=1")) == 1
    assert visible_files(out) == before
    assert not list(out.glob(".staging-*"))


def test_f14_a_chain_commits_all_its_tables_at_once(seed0, tmp_path):
    """The rerun with --seed=1 that holds replaces every table of the chain in one commit: the folder holds tables
    of seed 0 until the chain's single commit, then all of seed 1. Checked on the commit itself: the only renames
    into the folder come after the three pipelines, all from one staging folder."""
    out = tmp_path / "out"
    shutil.copytree(seed0 / "out", out)
    before = visible_files(out)
    seen = []
    real_run_into = pipeline.run._run_into

    def run_into(staging, target, *args, **kwargs):
        seen.append(visible_files(out))  # what a reader of the folder sees while each pipeline runs
        return real_run_into(staging, target, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline.run, "_run_into", run_into)
        assert main(chain_args(out, seed0 / "cache", "--seed=1")) == 0
    assert seen == [before] * 3
    after = report(out)
    assert {name: section["stage"] for name, section in after["tables"].items()} == {
        "train_negatives": "train_negatives", "hard_positives": "hard_positives", "train": "train_set"}
    assert all(section["balanced"] for section in after["tables"].values())
    changed = {name for name, data in visible_files(out).items() if before.get(name) != data}
    assert {"train_negatives/train-00000-of-00001.parquet", "hard_positives/train-00000-of-00001.parquet",
            "train/train-00000-of-00001.parquet"} <= changed
