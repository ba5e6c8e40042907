"""The trainer's test data: a train table of 24 rows over generated JPEGs (2 of them missing, 1 undecodable), the
flags of a tiny CPU run on it (hardpos-tiny, random init), and readers of what a run writes."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import write_run_folder
from tests.image_fixtures import corrupt_jpeg, jpeg

N_ROWS, BATCH, STEPS = 24, 8, 8  # 3 steps per epoch: 8 steps cross two epoch boundaries
MISSING, CORRUPT = {5, 17}, {11}  # rows whose image file is absent / undecodable
COLORS = ["red", "blue", "green", "yellow", "black", "white"]
THINGS = ["dog", "cat", "car", "bird"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Imported by the trainer's test modules. The tiny model's ops are too small to gain from threads; on a shared
    2-core machine they only contend."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def train_row(i: int) -> dict:
    color, thing = COLORS[i % 6], THINGS[i % 4]
    return {"example_id": f"ex{i:03d}", "caption_id": 1000 + i, "image_id": i, "key": str(1000 + i),
            "file_name": f"{i:012d}.jpg", "image_url": None, "source_file": "captions_train2017.json",
            "caption": f"a {color} {thing} next to a tree number {i}",
            "hard_positive": f"next to a tree a {color} {thing} number {i}",
            "positive_type": "swap" if i % 3 == 0 else "replace",
            "hard_negative": f"a {thing} next to a {color} tree number {i}", "negative_type": "replace",
            "positive_generator": None, "positive_model": "test", "positive_prompt_sha256": "0" * 64,
            "negative_generator": "replace/1", "negative_source": "caption",
            "seed": 0}


def make_train_data(root: Path) -> SimpleNamespace:
    """(data: a run folder with the train table, images: a COCO folder) under root."""
    images = root / "coco" / "train2017"  # ImageLookup finds file_name under COCO's train2017/
    images.mkdir(parents=True)
    for i in range(N_ROWS):
        if i in CORRUPT:
            (images / train_row(i)["file_name"]).write_bytes(corrupt_jpeg(i)[:200])
        elif i not in MISSING:
            (images / train_row(i)["file_name"]).write_bytes(jpeg(i, (40, 36)))
    write_run_folder(root / "run", "train", [train_row(i) for i in range(N_ROWS)])
    return SimpleNamespace(data=root / "run", images=root / "coco")


def run_args(data, out, *extra):
    # the fixture leaves 3 of its 24 rows without a usable image on purpose: allow them (up to 3 of a batch of 8)
    return [f"--data={data.data}", f"--images={data.images}", f"--out={out}", "--model=hardpos-tiny", "--pretrained=",
            "--lr=1e-3", "--warmup_steps=2", f"--batch_size={BATCH}", "--log_every=100", "--max_missing_images=0.4",
            *extra]


def log_records(out):
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def weights(path):
    """A checkpoint's weights, read as a user's torch.load does by default: tensors and plain values only."""
    return torch.load(path, map_location="cpu", weights_only=True)["model"]
