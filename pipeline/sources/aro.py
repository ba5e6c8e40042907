"""ARO VG-Attribution (`visual_genome_attribution.json`): a JSON list of objects, one per test case."""
from __future__ import annotations

import math
import posixpath

from pipeline.perturb.outcomes import Reject
from pipeline.records import identity
from pipeline.sources.files import DEFAULT_BOUNDS, InputBounds, ReadJsonRecords, read_json_list, require_file
from pipeline.sources.vl_checklist import image_id_from_path

SOURCE = "aro_vga"
BBOX = ("bbox_x", "bbox_y", "bbox_w", "bbox_h")
# A box corner farther than this from the origin lies in no Visual Genome image: 65,535 is the largest side a JPEG
# (their format) can have. A box past it (bbox_x = 2**70 is a finite float) crashed the evaluator's crop.
MAX_BBOX_COORDINATE = 65_535


def check_file(path: str) -> None:
    require_file(path)
    read_json_list(path)


def _text(raw: dict, field: str, bounds: InputBounds, required: bool = True) -> str | None:
    value = raw.get(field)
    if value is None and not required:
        return None
    if field.endswith("caption"):
        return bounds.caption(value, field)
    return bounds.text(value, field)


def _number(raw: dict, field: str) -> float:
    value = raw.get(field)
    if isinstance(value, str):  # some dumps quote numbers
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Reject("bad_bbox", f"{field} must be a number, got {value!r:.40}")
    return float(value)


def _check_box_range(bbox: dict) -> None:
    x, y, w, h = (bbox[field] for field in BBOX)
    corners = {"bbox_x": x, "bbox_y": y, "bbox_x + bbox_w": x + w, "bbox_y + bbox_h": y + h}
    for name, value in corners.items():
        if abs(value) > MAX_BBOX_COORDINATE:
            raise Reject("bbox_out_of_range", f"{name} = {value:.6g} is farther than {MAX_BBOX_COORDINATE:,} pixels "
                                              f"from the image's corner")


def _image_id(raw: dict, image_path: str, bounds: InputBounds) -> int | None:
    value = raw.get("image_id")
    if isinstance(value, int) and not isinstance(value, bool):
        return bounds.id(value, "image_id")
    if isinstance(value, str) and value.strip().isdigit():
        return bounds.id(int(value), "image_id")
    return image_id_from_path(image_path, bounds)


def normalise(raw, source_file: str, index: int, *, bounds: InputBounds = DEFAULT_BOUNDS) -> dict:
    """The record as a plain dict with a stable key, or Reject(reason)."""
    if not isinstance(raw, dict):
        raise Reject("not_an_object", f"expected a JSON object, got a JSON {type(raw).__name__}")
    image_path = _text(raw, "image_path", bounds)
    bbox = {field: _number(raw, field) for field in BBOX}
    if bbox["bbox_w"] <= 0 or bbox["bbox_h"] <= 0:
        raise Reject("bad_bbox", f"empty box {bbox['bbox_w']}x{bbox['bbox_h']}")
    _check_box_range(bbox)
    attributes = raw.get("attributes")
    if not isinstance(attributes, list) or len(attributes) != 2:
        raise Reject("bad_attributes", f"expected two attribute strings, got {attributes!r:.80}")
    attributes = [bounds.text(a, "attributes") for a in attributes]
    return {
        **identity(SOURCE, source_file, index),
        "image_path": image_path,
        "image_id": _image_id(raw, image_path, bounds),
        **bbox,
        "caption": _text(raw, "true_caption", bounds),
        "hard_negative": _text(raw, "false_caption", bounds),
        "attributes": list(attributes),
        "obj1_name": _text(raw, "obj1_name", bounds, required=False),
        "obj2_name": _text(raw, "obj2_name", bounds, required=False),
    }


def read_aro_attribution(path: str, stage: str, table: str, bounds: InputBounds = DEFAULT_BOUNDS) -> ReadJsonRecords:
    source_file = posixpath.basename(path.replace("\\", "/"))
    return ReadJsonRecords([(path, source_file, {})], SOURCE, normalise, stage, table, bounds)
