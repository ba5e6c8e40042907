"""Issue 27 F11: an ARO box far outside any image. bbox_x = 2**70 is a finite number, so it was accepted into the
SWAP set, and the evaluator then crashed in PIL's crop (OverflowError). The source now rejects a box corner past
65,535 pixels (bbox_out_of_range), and the evaluator's crop skips a box that misses its image or would be too large
to hold, with the reason, whatever table it reads."""
from __future__ import annotations

import json
import random

import pytest
from PIL import Image

from pipeline.perturb.outcomes import Reject
from pipeline.publish.images import RowImage
from pipeline.run import main
from pipeline.sources import aro
from pipeline.train import evaluate
from tests.conftest import ARO_SAMPLE, eval_sets_args, report, rows_of, write_run_folder

FAR = 2**70


def test_f11_a_box_past_any_image_is_a_rejected_dead_letter(tmp_path):
    records = json.loads(ARO_SAMPLE.read_text())
    good = records[0]
    far = [{**good, "bbox_x": FAR}, {**good, "bbox_y": -FAR}, {**good, "bbox_w": 1e30}, {**good, "bbox_h": str(FAR)}]
    path = tmp_path / "aro.json"
    path.write_text(json.dumps(records + far))
    out = tmp_path / "out"
    assert main(eval_sets_args(out, None, path, "--progress_seconds=0")) == 0
    swap = report(out)["tables"]["swap"]
    assert swap["balanced"] and swap["reject_reasons"]["bbox_out_of_range"] == len(far)
    assert all(abs(row[c]) < 2**16 for row in rows_of(out, "swap") for c in ("bbox_x", "bbox_y", "bbox_w", "bbox_h"))


def aro_record(**changes):
    return {"image_path": "VG_100K/1.jpg", "bbox_x": 1, "bbox_y": 2, "bbox_w": 3, "bbox_h": 4,
            "true_caption": "the crouched cat and the open door", "false_caption": "the open cat and the crouched door",
            "attributes": ["crouched", "open"], **changes}


@pytest.mark.parametrize("changes", [{"bbox_x": FAR}, {"bbox_x": -70_000}, {"bbox_y": 65_000, "bbox_h": 600},
                                     {"bbox_w": float(FAR)}])
def test_f11_the_source_bounds_each_corner(changes):
    with pytest.raises(Reject) as info:
        aro.normalise(aro_record(**changes), "f.json", 0)
    assert info.value.reason == "bbox_out_of_range"


def test_f11_a_box_inside_the_largest_jpeg_is_kept():
    record = aro.normalise(aro_record(bbox_x=-10, bbox_y=65_000, bbox_h=535), "f.json", 0)
    assert (record["bbox_x"], record["bbox_y"], record["bbox_h"]) == (-10.0, 65_000.0, 535.0)


def noise(size) -> Image.Image:
    rng = random.Random(str(size))
    return Image.frombytes("RGB", size, rng.randbytes(size[0] * size[1] * 3))


@pytest.mark.parametrize("bbox", [(FAR, 0.0, 10.0, 10.0), (0.0, 0.0, 1e6, 1e6)])
def test_f11_the_read_back_crop_refuses_a_wild_box(bbox):
    row = RowImage("e", "swap", noise((32, 24)), bbox, (32, 24))
    with pytest.raises(ValueError):  # never an OverflowError, nor an allocation of the whole box
        row.crop()


def test_f11_the_evaluator_skips_a_wild_box_with_its_reason(sample_output, tmp_path):
    swap = rows_of(sample_output, "swap")[:4]
    wild = {swap[1]["example_id"]: ("bad_box", {"bbox_x": float(FAR)}),
            swap[2]["example_id"]: ("image_too_large", {"bbox_x": 0.0, "bbox_y": 0.0, "bbox_w": 1e6, "bbox_h": 1e6}),
            swap[3]["example_id"]: ("bad_box", {"bbox_x": -500.0, "bbox_w": 100.0})}
    rows = [{**row, **wild[row["example_id"]][1]} if row["example_id"] in wild else row for row in swap]
    data = write_run_folder(tmp_path / "data", "swap_eval", rows)
    images = tmp_path / "images"
    for row in swap:
        (images / row["image_path"]).parent.mkdir(parents=True, exist_ok=True)
        noise((int(row["bbox_x"] + row["bbox_w"]) + 8, int(row["bbox_y"] + row["bbox_h"]) + 8)).save(
            images / row["image_path"], "JPEG")
    out = tmp_path / "out"
    assert evaluate.main(["--model=hardpos-tiny", "--pretrained=", f"--data={data}", f"--images={images}",
                          f"--out={out}", "--workers=0", "--bootstrap=0"]) == 0
    result = json.loads((out / "eval.json").read_text())
    assert (result["rows"], result["scored"]) == (4, 1)
    assert {r["example_id"]: r["reason"] for r in result["skipped_rows"]} == {e: r for e, (r, _) in wild.items()}
