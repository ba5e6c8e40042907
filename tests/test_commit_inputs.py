"""Issue 35, what train_set joins: only tables made from its own captions file, seed and bounds (N24), only shards
with the sha256 their report recorded (N46), and only once a commit cut short in the folder is finished (N40)."""
from __future__ import annotations

import errno
import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pipeline.io.commit
from pipeline.io.schema import load_schema
from pipeline.run import main
from pipeline.stages.train_set import JOIN_COLUMNS
from tests.conftest import REPO, visible_files

CAPTIONS = REPO / "samples" / "coco" / "captions_sample.json"
REPLAY = REPO / "samples" / "coco" / "hard_positives_replay.jsonl"


def chain_args(out, cache, *extra: str) -> list[str]:
    return ["--stage=all", f"--coco_captions={CAPTIONS}", "--llm_engine=replay", f"--llm_replay={REPLAY}",
            "--model=m", f"--cache_dir={cache}", f"--output_dir={out}", "--progress_seconds=0", *extra]


def train_set_args(out, captions=CAPTIONS, *extra: str) -> list[str]:
    return ["--stage=train_set", f"--coco_captions={captions}", f"--output_dir={out}", "--progress_seconds=0", *extra]


@pytest.fixture(scope="module")
def seed0(tmp_path_factory):
    """The chain on the sample, 10 rows a shard (as the probe ran it: hard_positives in 7 shards)."""
    base = tmp_path_factory.mktemp("seed0")
    assert main(chain_args(base / "out", base / "cache", "--rows_per_shard=10")) == 0
    return base


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_n24_train_set_refuses_tables_made_from_other_captions(seed0, tmp_path, capsys):
    """Captions B with other texts under A's ids: 00ef301 joined them by id, so "A red car parked near a tree." got
    the hard positive of another caption, and the run said nothing."""
    out = tmp_path / "out"
    shutil.copytree(seed0 / "out", out)
    data = json.loads(CAPTIONS.read_text())
    texts = [a for a in data["annotations"] if isinstance(a, dict) and isinstance(a.get("caption"), str)]
    rotated = [a["caption"] for a in texts[1:] + texts[:1]]
    for annotation, caption in zip(texts, rotated):
        annotation["caption"] = caption
    other = tmp_path / "other_captions.json"
    other.write_text(json.dumps(data))
    before = visible_files(out)
    capsys.readouterr()

    assert main(train_set_args(out, other)) == 2
    [line] = error_lines(capsys)
    assert line.startswith(f"error: --coco_captions={other} (sha256 ") and str(CAPTIONS) in line
    assert main(train_set_args(out, CAPTIONS, "--seed=1")) == 2
    [line] = error_lines(capsys)
    assert line.startswith("error: --seed=1 differs from --seed=0, with which table ")
    assert visible_files(out) == before


def flip_unseen_by_page_checksums(data: bytes) -> bytes:
    """`data` with the first single-bit flip that train_set's reading of a hard_positives shard (its columns, a
    batch at a time, every page's checksum checked) takes for other rows without an error: Parquet's page
    checksums leave the page headers out."""
    columns = [c for c in load_schema("hard_positives").column_names if c in JOIN_COLUMNS]

    def rows(shard: bytes) -> list[dict]:
        batches = pq.ParquetFile(pa.BufferReader(shard), page_checksum_verification=True).iter_batches(columns=columns)
        return [row for batch in batches for row in batch.to_pylist()]

    intact = rows(data)
    for position in range(4, len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[position] ^= 1 << bit
            try:
                if rows(bytes(flipped)) != intact:
                    return bytes(flipped)
            except (OSError, ValueError):  # pyarrow's errors: a flip that is found
                continue
    raise AssertionError("every flip was found")


def test_n46_train_set_reads_no_shard_whose_sha256_differs_from_its_report(seed0, tmp_path, capsys):
    """A bit flipped in a page header of a hard_positives shard: 00ef301 read it as no rows without an error,
    filed its captions as no_hard_positive and exited 0 with fewer train rows; now the run fails naming the shard
    and commits nothing."""
    out = tmp_path / "out"
    shutil.copytree(seed0 / "out", out)
    shard = sorted((out / "hard_positives").glob("*.parquet"))[0]
    shard.write_bytes(flip_unseen_by_page_checksums(shard.read_bytes()))
    before = visible_files(out)
    capsys.readouterr()

    assert main(train_set_args(out)) == 1
    [line] = error_lines(capsys)
    assert line.startswith(f"error: {shard}: its sha256 differs from the one {out / 'report.json'} recorded")
    assert visible_files(out) == before
    assert not list(out.glob(".staging-*"))


def test_n40_train_set_after_a_commit_cut_between_renames_finishes_it_first(seed0, tmp_path, monkeypatch, capsys):
    """A --seed=1 chain whose commit stops after moving the old train_negatives aside, before moving the new one
    in: 00ef301's train_set checked its tables before taking the lock and finishing that commit, and said "no
    train_negatives table, run --stage=train_negatives first"."""
    out = tmp_path / "out"
    shutil.copytree(seed0 / "out", out)
    real_rename = os.rename

    def cut_short(src, dst):
        if os.path.basename(src) == "train_negatives" and ".staging-" in str(src):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_rename(src, dst)

    with monkeypatch.context() as patch:
        patch.setattr(pipeline.io.commit.os, "rename", cut_short)
        assert main(chain_args(out, seed0 / "cache", "--seed=1")) == 1
    assert not (out / "train_negatives").exists()
    capsys.readouterr()

    assert main(train_set_args(out, CAPTIONS, "--seed=1")) == 0
    assert "finished the interrupted commit of --stage=all" in capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    assert {name: section["made_from"]["options"]["seed"] for name, section in report["tables"].items()} == {
        "train_negatives": 1, "hard_positives": 1, "train": 1}
    assert all(section["balanced"] for section in report["tables"].values())
