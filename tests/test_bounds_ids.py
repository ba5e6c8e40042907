"""Issue 27 F17: image ids are unique or their captions are dead letters. Two COCO images with the same id: the last
silently won for every caption of that image; now each of those captions is rejected (duplicate_image_id) and
read = rows + discarded + rejected still holds. The images stage, which joins rows of several tables by image id,
refuses an id that rows give different urls the same way."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from pipeline.perturb.outcomes import Reject
from pipeline.run import main
from pipeline.sources import coco
from tests.conftest import SAMPLES, report, rows_of
from tests.image_fixtures import ImageServer, jpeg, schema_row, write_table

CAPTIONS = SAMPLES / "coco" / "captions_sample.json"


def captions_with_a_twin_image(path):
    """The sample captions file with a second image entry under the id of the first, another picture."""
    data = json.loads(CAPTIONS.read_text())
    first = data["images"][0]
    data["images"].append({**first, "file_name": "000000999999.jpg",
                           "coco_url": "http://images.cocodataset.org/val2017/000000999999.jpg"})
    path.write_text(json.dumps(data))
    captions = [a["id"] for a in data["annotations"] if isinstance(a, dict) and a.get("image_id") == first["id"]]
    return first["id"], captions


def test_f17_captions_of_a_duplicated_image_id_are_dead_letters(tmp_path):
    image_id, caption_ids = captions_with_a_twin_image(tmp_path / "captions.json")
    assert len(caption_ids) == 2
    out = tmp_path / "out"
    assert main(["--stage=order_eval", f"--coco_captions={tmp_path / 'captions.json'}", f"--output_dir={out}",
                 "--progress_seconds=0"]) == 0
    section = report(out)["tables"]["order_eval"]
    assert section["balanced"]
    assert section["read"] == section["rows"] + section["discarded"] + section["rejected"]
    assert section["reject_reasons"]["duplicate_image_id"] == len(caption_ids)
    assert image_id not in {row["image_id"] for row in rows_of(out, "order_eval")}
    letters = [r for p in sorted((out / "rejected").glob("*.parquet")) for r in pq.read_table(p).to_pylist()
               if r["reason"] == "duplicate_image_id"]
    assert sorted(r["source_index"] for r in letters) == sorted(caption_ids)
    assert all(r["detail"] == f"image_id {image_id} is listed 2 times in the file's images" for r in letters)


def test_f17_normalise_refuses_to_choose_between_two_entries():
    images = [{"id": 7, "file_name": "a.jpg", "coco_url": "http://h/a.jpg"},
              {"id": 7, "file_name": "b.jpg", "coco_url": "http://h/b.jpg"},
              {"id": 8, "file_name": "c.jpg", "coco_url": "http://h/c.jpg"},
              {"id": 9}, {"id": 9, "file_name": "d.jpg"}]  # a malformed twin is a twin too
    index = coco.image_index(images)
    for image_id in (7, 9):
        with pytest.raises(Reject) as info:
            coco.normalise({"id": 1, "image_id": image_id, "caption": "A dog."}, "f.json", index)
        assert info.value.reason == "duplicate_image_id"
    record = coco.normalise({"id": 2, "image_id": 8, "caption": "A cat."}, "f.json", index)
    assert (record["file_name"], record["image_url"]) == ("c.jpg", "http://h/c.jpg")


def test_f17_the_images_stage_never_picks_one_picture_for_an_id_rows_disagree_on(tmp_path):
    """Across tables too: two rows with image_id 5 and different urls were both given the smaller url's image."""
    out = tmp_path / "out"
    with ImageServer({"a/5.jpg": jpeg(1), "b/5.jpg": jpeg(2), "a/6.jpg": jpeg(3)}) as server:
        write_table(out, "train", "train", [
            schema_row("train", example_id="cap-a", image_id=5, image_url=f"{server.url}/a/5.jpg"),
            schema_row("train", example_id="cap-c", image_id=6, image_url=f"{server.url}/a/6.jpg")])
        write_table(out, "train_negatives", "train_negatives", [
            schema_row("train_negatives", example_id="cap-b", image_id=5, image_url=f"{server.url}/b/5.jpg")])
        assert main(["--stage=images", f"--output_dir={out}", "--image_threads=2", "--image_timeout=5"]) == 0
        requested = server.snapshot()
    index = {r["example_id"]: r for t in ("train", "train_negatives")
             for r in pq.read_table(out / "images" / "index" / f"{t}.parquet").to_pylist()}
    assert {e: (r["status"], r["reason"]) for e, r in index.items()} == {
        "cap-a": ("failed", "duplicate_image_id"), "cap-b": ("failed", "duplicate_image_id"), "cap-c": ("ok", None)}
    assert (index["cap-a"]["url"], index["cap-b"]["url"]) == (f"{server.url}/a/5.jpg", f"{server.url}/b/5.jpg")
    assert set(requested) == {"a/6.jpg"}  # neither picture of image 5 fetched
    tables = json.loads((out / "images" / "report.json").read_text())["tables"]
    assert all(t["balanced"] for t in tables.values())
    assert tables["train_negatives"]["reject_reasons"] == {"duplicate_image_id": 1}
