"""The evaluation suites of `python -m pipeline.train.evaluate --suites=...`, one module per kind:

- hardpos.py:   replace, swap (our sets: Original / Augmented accuracy, Brittleness; pipeline/train/evaluate.py)
- ranking.py:   sugarcrepe, aro, vl_checklist (one image, a correct caption and its negatives)
- zeroshot.py:  imagenet, vtab (zero-shot classification through clip-benchmark)
- retrieval.py: coco_retrieval, flickr_retrieval (image and text Recall@K through clip-benchmark)

Each suite reads its data in the layout its authors publish, from its own root flag. `check(args)` says why a
suite cannot run (a root flag not given or not there) before any model is loaded; `run(ctx, args)` scores one
model and returns plain JSON-able figures.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HARDPOS, RANKING, CLASSIFICATION, RETRIEVAL = "hard_positive", "ranking", "classification", "retrieval"


class SuiteSkipped(Exception):
    """The suite cannot run (its data is not there): one line naming the flag or path."""


@dataclass
class Context:
    """One loaded model and the run's settings, handed to every suite."""
    clip: object
    transform: object
    tokenizer: object
    model: str
    pretrained: str
    slug: str
    out: Path
    device: str = "cpu"
    precision: str = "fp32"
    batch_size: int = 64
    workers: int = 0
    bootstrap: int = 1000
    seed: int = 0
    image_max_pixel_values: int = 0

    @property
    def amp(self) -> bool:
        return self.precision.startswith("amp")

    def typed_transform(self):
        """The eval transform, its tensor cast to the weights' dtype under fp16/bf16 (clip-benchmark hands the
        images to the model as they come from the loader)."""
        from pipeline.train.scoring import input_dtype

        dtype = input_dtype(self.precision)
        return self.transform if dtype is None else CastTransform(self.transform, dtype)


class CastTransform:
    """transform(image).to(dtype), picklable for loader workers."""

    def __init__(self, transform, dtype):
        self.transform, self.dtype = transform, dtype

    def __call__(self, image):
        return self.transform(image).to(self.dtype)


def root_flag(args, flag: str) -> Path:
    """The folder a root flag names, or SuiteSkipped naming the flag."""
    value = getattr(args, flag, None)
    if not value:
        raise SuiteSkipped(f"--{flag} not given")
    if not Path(value).is_dir():
        raise SuiteSkipped(f"--{flag}={value} does not exist")
    return Path(value)


def suite_table() -> dict:
    """suite name -> (kind, module). Imported lazily so that --help and the REPLACE/SWAP path stay light."""
    from pipeline.train.suites import hardpos, ranking, retrieval, zeroshot

    return {
        "replace": (HARDPOS, hardpos), "swap": (HARDPOS, hardpos),
        "sugarcrepe": (RANKING, ranking), "aro": (RANKING, ranking), "vl_checklist": (RANKING, ranking),
        "imagenet": (CLASSIFICATION, zeroshot), "vtab": (CLASSIFICATION, zeroshot),
        "coco_retrieval": (RETRIEVAL, retrieval), "flickr_retrieval": (RETRIEVAL, retrieval),
    }


SUITES = ("replace", "swap", "sugarcrepe", "aro", "vl_checklist", "imagenet", "vtab", "coco_retrieval",
          "flickr_retrieval")
