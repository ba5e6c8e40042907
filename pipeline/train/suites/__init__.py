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

import contextlib
import os
import re
import stat
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


@contextlib.contextmanager
def bounded_images(max_pixel_values: int):
    """While clip-benchmark's webdataset decodes images, PIL refuses one past max_pixel_values (pixels x 3
    channels) from its header, before decoding it (DecompressionBombError: the suite fails in one line). PIL
    refuses only past twice its MAX_IMAGE_PIXELS and warns between the two."""
    import warnings

    from PIL import Image

    before = Image.MAX_IMAGE_PIXELS
    if max_pixel_values > 0:
        Image.MAX_IMAGE_PIXELS = max(1, max_pixel_values // 3 // 2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            yield
    finally:
        Image.MAX_IMAGE_PIXELS = before


class CastTransform:
    """transform(image).to(dtype), picklable for loader workers."""

    def __init__(self, transform, dtype):
        self.transform, self.dtype = transform, dtype

    def __call__(self, image):
        return self.transform(image).to(self.dtype)


TEXT_SUFFIXES = (".json", ".jsonl", ".txt", ".csv", ".tsv")  # what the suites and their libraries read whole
TEXT_LIMIT = 256 << 20  # the largest annotation file of a published suite is tens of MB
# Inside a WebDataset shard: webdataset reads each member whole and keeps one sample's members together, and
# clip-benchmark tokenizes every line of a caption member. Published samples: an image of a few MB, captions,
# a class number or a small JSON of a few hundred bytes.
SAMPLE_LIMIT = 64 << 20
MEMBER_TEXT_LIMIT = 64 << 10
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
# webdataset decodes every member of a sample by the last part of its name with default handlers the suites never
# turn off: .pyd/.pickle through pickle.loads and .pth through torch.load (both run code the file names); .gz
# gunzipped and .npz unzipped whole (a few KB can expand to GBs); .ten/.tb, .mp/.msg and .cbor into objects of
# sizes the data declares. No published suite shard holds one.
UNSAFE_MEMBER_SUFFIXES = (".pyd", ".pickle", ".pth", ".gz", ".npz", ".ten", ".tb", ".mp", ".msg", ".cbor")
# webdataset's sample key and suffix of a member name (tariterators.base_plus_ext): up to the first dot of the base
# name; a name with no dot there is skipped, and does not end the sample.
WDS_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_checked_roots: dict[str, Path] = {}
WDS_URL_SYNTAX = ("::", "{", "}", "\\")  # braceexpand also drops a backslash, reading the name without it


def root_flag(args, flag: str) -> Path:
    """The folder a root flag names, as its absolute real path (clip-benchmark and webdataset read a `pipe:` prefix
    as a command and a `://` as a URL to curl, whatever a local folder is called), or SuiteSkipped naming the flag.
    Everything under it is checked once (suite_root_problem): UsageError, one line, before any model loads."""
    value = getattr(args, flag, None)
    if not value:
        raise SuiteSkipped(f"--{flag} not given")
    if not Path(value).is_dir():
        raise SuiteSkipped(f"--{flag}={value} does not exist")
    real = os.path.realpath(value)
    if real not in _checked_roots:
        problem = suite_root_problem(real)
        special = [s for s in WDS_URL_SYNTAX if s in real]
        if special:  # webdataset splits a shard list at "::" and expands braces: another folder, or a command
            problem = f"its real path {real[:200]!r} holds {special[0]!r}, which webdataset reads as URL syntax"
        if problem:
            from pipeline.train.clip import UsageError

            raise UsageError(f"--{flag}={value}: {problem}")
        _checked_roots[real] = Path(real)
    return _checked_roots[real]


def suite_root_problem(root: str) -> str | None:
    """Why a suite's folder cannot be read safely, or None: an entry that is no file or folder (a FIFO would hang the
    read, a device never end), a file of the kernel's (/proc/self/environ holds the environment's secrets), or an
    annotation file (TEXT_SUFFIXES) past TEXT_LIMIT (read whole by the suite or its library). Links are followed,
    as a user's folder of links to a dataset is."""
    from pipeline.folder_lock import kernel_file

    seen = {os.path.realpath(root)}
    for here, dirs, names in os.walk(root, followlinks=True):
        # each real folder once: links that branch to the same folders (a to d1, b to d1, ...) would be 2^depth paths
        kept = []
        for d in dirs:
            real = os.path.realpath(os.path.join(here, d))
            if real not in seen:
                seen.add(real)
                kept.append(d)
        dirs[:] = kept
        for name in names + dirs:
            path = os.path.join(here, name)
            shown = os.path.relpath(path, root)
            if kernel_file(path):
                return f"{shown} is a file of the kernel's ({os.path.realpath(path)}), not data"
            try:
                found = os.stat(path)
            except OSError as e:
                return f"{shown} cannot be read ({e.strerror or e})"
            if stat.S_ISDIR(found.st_mode):
                continue
            if not stat.S_ISREG(found.st_mode):
                return f"{shown} is not a regular file (a FIFO or a device would block or never end)"
            if name.lower().endswith(TEXT_SUFFIXES) and found.st_size > TEXT_LIMIT:
                return f"{shown} has {found.st_size:,} bytes, more than any suite's annotation file ({TEXT_LIMIT:,})"
            if name.lower().endswith(".tar"):
                problem = shard_problem(path)
                if problem:
                    return f"{shown}: {problem}"
    return None


def shard_problem(path: str) -> str | None:
    """Why a WebDataset shard cannot be read safely, or None: a member webdataset would decode by running code or
    by unbounded expansion (UNSAFE_MEMBER_SUFFIXES), a text member (caption, class, JSON) past MEMBER_TEXT_LIMIT,
    or one sample's members (webdataset's key: the name up to the first dot of its base name, consecutive members)
    past SAMPLE_LIMIT. Sizes come from the headers, so a sparse or compressed member is caught without being read;
    a gzip shard is decompressed once, in a stream. A shard that is no tar is left to its suite, which then fails
    alone."""
    import tarfile

    key, sample_bytes = None, 0
    try:
        with tarfile.open(path, "r:*") as tar:
            while (member := tar.next()) is not None:
                tar.members.clear()  # a shard of millions of members would otherwise be held as a list
                found = WDS_KEY.match(member.name)
                if not member.isfile() or not found:
                    continue  # webdataset reads neither
                name_key, suffix = found[1], "." + found[2].rsplit(".", 1)[-1].lower()
                if suffix in UNSAFE_MEMBER_SUFFIXES:
                    how = "running the code it holds" if suffix in (".pyd", ".pickle", ".pth") else \
                        "expanding it whole" if suffix in (".gz", ".npz") else "building the objects it declares"
                    return f"member {member.name[:200]!r} is a {suffix} file, which webdataset decodes by {how}"
                if suffix not in IMAGE_SUFFIXES and member.size > MEMBER_TEXT_LIMIT:
                    return (f"member {member.name[:200]!r} has {member.size:,} bytes, more than a sample's text "
                            f"({MEMBER_TEXT_LIMIT:,})")
                sample_bytes = member.size + (sample_bytes if name_key == key else 0)
                key = name_key
                if sample_bytes > SAMPLE_LIMIT:
                    return f"sample {key[:200]!r} has {sample_bytes:,} bytes, more than a sample ({SAMPLE_LIMIT:,})"
    except (tarfile.TarError, OSError, EOFError):
        return None
    return None


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
