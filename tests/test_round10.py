"""Round 10 (probe10), the cases left open by the round-10 fixes in test_round9.py: a link planted in the release
being switched in, after the switch's own check (U1-U3), is found and removed before publish returns; a publish
folder inside a run's table folder is refused, and a commit keeps a user's nested files there (U6); the LLM cache
is never in a published folder (U41); a compressed replay file is read to a bounded size (a compression bomb)."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

import pipeline.stages.publish as publish_stage
from pipeline.io.commit import commit, new_staging
from pipeline.llm.engines import EXPANSION_FLOOR, ReplayError, read_replay
from pipeline.publish.layout import write_run_folder
from pipeline.run import main
from pipeline.tables.folders import MANIFEST, NEXT
from pipeline.tables.load import load_table
from tests.image_fixtures import order_rows, order_run

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CAPTIONS = ROOT / "samples" / "coco" / "captions_sample.json"
REPLAY = ROOT / "samples" / "coco" / "hard_positives_replay.jsonl"


@pytest.fixture
def out(tmp_path) -> Path:
    return order_run(tmp_path)


@pytest.mark.parametrize("planted", ["data", "README.md", MANIFEST])
def test_u1_u3_a_link_planted_after_the_switch_check_is_removed_not_served(planted, out, tmp_path, monkeypatch,
                                                                           capsys):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("KEEP")
    pending, done = publish_stage._switch_pending, []

    def plant_once(target):  # a racer in the publish folder, between finish_switch's link check and its renames
        aside = Path(target) / NEXT
        if not done and (aside / MANIFEST).is_file():
            done.append(True)
            path = aside / planted
            if path.is_dir():
                for inner in sorted(path.rglob("*"), reverse=True):
                    inner.rmdir() if inner.is_dir() else inner.unlink()
                path.rmdir()
                path.symlink_to(victim)
            else:
                os.replace(path, victim / planted)
                path.symlink_to(victim / planted)
        return pending(target)

    monkeypatch.setattr(publish_stage, "_switch_pending", plant_once)
    assert main(["--stage=publish", f"--output_dir={out}"]) == 2
    assert done and "not the file publish wrote" in capsys.readouterr().err
    hub = out / "hub"
    assert not any(p.is_symlink() for p in hub.rglob("*")) and not any(p.is_symlink() for p in hub.iterdir())
    assert (victim / "keep.txt").read_text() == "KEEP"
    monkeypatch.setattr(publish_stage, "_switch_pending", pending)
    assert main(["--stage=publish", f"--output_dir={out}"]) == 0  # the next publish builds it whole
    assert load_table(str(hub), "order_eval").num_rows == 3


@pytest.mark.parametrize("inside", ["run/order_eval/pub", "run/rejected/pub", "run/order_eval"])
def test_u6_a_publish_folder_inside_a_runs_table_folder_is_refused(inside, out, capsys):
    assert main(["--stage=publish", f"--output_dir={out}", f"--publish_dir={out / inside}"]) == 2
    assert "a folder that the stages of the run" in capsys.readouterr().err
    assert not (out / inside / MANIFEST).exists()


def test_u6_a_commit_keeps_a_users_nested_files_in_a_table_folder(out):
    table = out / "run" / "order_eval"
    kept = table / "mine" / "test-00000-of-00001.parquet"  # named like a shard, but not the run's
    kept.parent.mkdir()
    kept.write_bytes(b"user's file")
    staging = new_staging(str(out / "run"), "order_eval")
    write_run_folder(Path(staging), "order_eval", order_rows(2, "new"))
    report = json.loads((Path(staging) / "report.json").read_text())
    commit(staging, str(out / "run"), [{"stage": "order_eval", **report}])
    assert kept.read_bytes() == b"user's file"
    assert sorted(p.name for p in table.iterdir()) == ["mine", "test-00000-of-00001.parquet"]


def test_u41_the_llm_cache_is_never_in_a_published_folder(out, tmp_path, capsys):
    assert main(["--stage=publish", f"--output_dir={out}"]) == 0
    cache = out / "hub" / "data" / "cache"
    code = main(["--stage=hard_positives", f"--coco_captions={SAMPLE_CAPTIONS}", "--llm_engine=replay",
                 f"--llm_replay={REPLAY}", "--model=hardpos-tiny", f"--output_dir={tmp_path / 'r2'}",
                 f"--cache_dir={cache}"])
    assert code == 2 and "a published folder" in capsys.readouterr().err
    assert not cache.exists()


def test_a_compressed_replay_file_is_read_to_a_bounded_size(tmp_path):
    line = REPLAY.read_bytes().splitlines(keepends=True)[0]
    bomb = tmp_path / "bomb.jsonl.gz"
    with gzip.open(bomb, "wb") as f:
        f.write(line * (EXPANSION_FLOOR // len(line) + 2))  # the same answer over and over: a few hundred kB packed
    with pytest.raises(ReplayError, match="compression bomb"):
        for _ in read_replay(str(bomb)):
            pass
    honest = tmp_path / "replay.jsonl.gz"
    honest.write_bytes(gzip.compress(REPLAY.read_bytes()))
    assert sum(1 for _ in read_replay(str(honest))) == sum(1 for _ in read_replay(str(REPLAY)))
