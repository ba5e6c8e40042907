"""VL-CheckList, Visual Genome subset: `[image_path, {"POS": [caption], "NEG": [caption]}]` per record."""
from __future__ import annotations

import os
import re

from apache_beam.io.filesystems import FileSystems

from pipeline.perturb.outcomes import Reject
from pipeline.records import identity
from pipeline.sources.files import (
    DEFAULT_BOUNDS,
    InputBounds,
    InputFileError,
    ReadJsonRecords,
    read_json_list,
    require_file,
)
from pipeline.urls import has_scheme

SOURCE = "vl_checklist"
# (subset, category) -> file relative to the VL-CheckList root.
FILES = {
    ("attribute", "action"): "Attribute/vg/action.json",
    ("attribute", "color"): "Attribute/vg/color.json",
    ("attribute", "material"): "Attribute/vg/material.json",
    ("attribute", "size"): "Attribute/vg/size.json",
    ("attribute", "state"): "Attribute/vg/state.json",
    ("relation", "action"): "Relation/vg/action.json",
    ("relation", "spatial"): "Relation/vg/spatial.json",
}
_IMAGE_ID = re.compile(r"(\d+)\.\w+$")


def check_root(root: str) -> None:
    """Fail fast, naming the path, unless every VG annotation file is there and is a JSON list."""
    if not has_scheme(root) and not os.path.isdir(root):
        raise InputFileError(f"{root}: no such directory (--vl_checklist_root)")
    for relpath in FILES.values():
        path = FileSystems.join(root, relpath)
        require_file(path)
        read_json_list(path)


def image_id_from_path(image_path: str, bounds: InputBounds = DEFAULT_BOUNDS) -> int | None:
    m = _IMAGE_ID.search(image_path)
    return bounds.id(int(m.group(1)), "image id in image_path") if m else None


def _caption(captions: dict, side: str, bounds: InputBounds) -> str:
    value = captions.get(side)
    if not isinstance(value, list) or len(value) != 1 or not isinstance(value[0], str):
        raise Reject("bad_captions", f"{side} must be a list of one caption, got {value!r:.80}")
    return bounds.caption(value[0], f"{side} caption")


def normalise(raw, source_file: str, index: int, subset: str, category: str, *,
              bounds: InputBounds = DEFAULT_BOUNDS) -> dict:
    """The record as a plain dict with a stable key, or Reject(reason)."""
    if not isinstance(raw, (list, tuple)) or len(raw) != 2:
        got = f"a list of {len(raw)}" if isinstance(raw, (list, tuple)) else f"a JSON {type(raw).__name__}"
        raise Reject("not_a_pair", f"expected [image_path, {{POS, NEG}}], got {got}")
    image_path, captions = raw
    bounds.text(image_path, "image_path")
    if not isinstance(captions, dict):
        raise Reject("bad_captions", f"expected {{POS, NEG}}, got a JSON {type(captions).__name__}")
    return {
        **identity(SOURCE, source_file, index),
        "subset": subset,
        "category": category,
        "image_path": image_path,
        "image_id": image_id_from_path(image_path, bounds),
        "caption": _caption(captions, "POS", bounds),
        "hard_negative": _caption(captions, "NEG", bounds),
    }


def read_vl_checklist(root: str, stage: str, table: str, bounds: InputBounds = DEFAULT_BOUNDS) -> ReadJsonRecords:
    files = [(FileSystems.join(root, relpath), relpath, {"subset": subset, "category": category})
             for (subset, category), relpath in sorted(FILES.items())]
    return ReadJsonRecords(files, SOURCE, normalise, stage, table, bounds)
