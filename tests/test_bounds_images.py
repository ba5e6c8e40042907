"""Issue 27 F13: image decode memory is bounded per image, whatever the codec. A 150 KB PNG declaring 6,000x6,000 RGBA
took one image worker to 3.1 GB (img2dataset decodes with OpenCV and blends the alpha in float64). Every image is
now measured from its header first (pixels x channels, --image_max_pixel_values) and refused undecoded past the
bound: in the images stage (before img2dataset sees it, and in the shard check), in the read-back of the shards,
and in the trainer's and evaluator's reading."""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
from PIL import Image, ImageDraw

from pipeline.publish.images import check_image, open_images
from pipeline.train import evaluate
from pipeline.train.data import TrainDataset
from pipeline.train.images import ImageLookup
from tests.conftest import REPO, write_run_folder
from tests.image_fixtures import ImageServer, jpeg, schema_row, write_table

GB = 1 << 30


def striped(mode: str, size: tuple[int, int]) -> Image.Image:
    """A large image that compresses to little: stripes of a few colours."""
    image = Image.new("RGBA", size, (10, 200, 30, 128))
    draw = ImageDraw.Draw(image)
    for x in range(0, size[0], 500):
        draw.rectangle((x, 0, x + 249, size[1]), fill=(x % 255, 0, 255 - x % 255, 255))
    return image if mode == "RGBA" else image.convert(mode)


def encoded(image: Image.Image, codec: str, **params) -> bytes:
    out = io.BytesIO()
    image.save(out, codec, **params)
    return out.getvalue()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """The probe's image: a 6,000x6,000 RGBA PNG of about 150 KB."""
    data = encoded(striped("RGBA", (6000, 6000)), "PNG", compress_level=9)
    assert len(data) < 200_000
    return data


# 5,000x5,000 is 75,000,000 values as RGB, 100,000,000 as RGBA: past the default bound (67,108,864) in every mode.
CODECS = [("PNG", "RGBA", {}), ("PNG", "L", {}), ("PNG", "P", {}), ("TIFF", "RGB", {"compression": "tiff_deflate"}),
          ("GIF", "P", {}), ("WEBP", "RGBA", {"lossless": True}), ("JPEG", "RGB", {"quality": 50}),
          ("JPEG", "CMYK", {"quality": 50})]


@pytest.mark.parametrize("codec,mode,params", CODECS, ids=[f"{c}-{m}" for c, m, _ in CODECS])
def test_f13_the_shard_check_refuses_a_large_image_of_any_codec_from_its_header(codec, mode, params):
    data = encoded(striped(mode, (5000, 5000)), codec, **params)
    error = check_image(data)
    assert error is not None and "pixel values" in error and "5,000x5,000" in error
    assert check_image(encoded(striped(mode, (64, 48)), codec, **params)) is None


@pytest.fixture(scope="module")
def stage(bomb, tmp_path_factory):
    """One --stage=images run, in a child process whose peak memory and its children's is measured: COCO rows with
    a small JPEG and the probe's PNG, and REPLACE rows with two Visual Genome images."""
    out = tmp_path_factory.mktemp("bounded_images")
    files = {"coco/1.jpg": jpeg(1), "coco/bomb.png": bomb,
             "vg/VG_100K/10.jpg": jpeg(10, (96, 64)), "vg/VG_100K/11.jpg": jpeg(11, (64, 96))}
    # Its own peak from VmHWM, not RUSAGE_SELF: Linux keeps ru_maxrss across exec, so that would be the test
    # process's size when it started the child (1.76 GB in a pytest-xdist worker, 0.42 GB in the stage itself).
    script = ("import re, resource, sys\n"
              "from pipeline.run import main\n"
              "code = main(sys.argv[1:])\n"
              "own = int(re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read())[1])\n"
              "print('peak_kb', max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
              "sys.exit(code)\n")
    with ImageServer(files) as server:
        write_table(out, "train", "train", [
            schema_row("train", example_id="cap-ok", image_id=1, image_url=f"{server.url}/coco/1.jpg"),
            schema_row("train", example_id="cap-bomb", image_id=2, image_url=f"{server.url}/coco/bomb.png")])
        write_table(out, "replace", "replace_eval", [
            schema_row("replace_eval", example_id=f"rep-{n}", source_index=n, image_path=f"VG_100K/{n}.jpg",
                       image_id=None) for n in (10, 11)])
        result = subprocess.run(
            [sys.executable, "-c", script, "--stage=images", f"--output_dir={out}",
             f"--image_root={server.url}/vg", "--image_processes=1", "--image_threads=4", "--image_timeout=5"],
            cwd=REPO, capture_output=True, text=True, timeout=600)
    peak = [int(line.split()[1]) * 1024 for line in result.stdout.splitlines() if line.startswith("peak_kb")]
    index = {r["example_id"]: r for t in ("train", "replace")
             for r in pq.read_table(out / "images" / "index" / f"{t}.parquet").to_pylist()}
    return SimpleNamespace(result=result, peak=peak[0] if peak else None, index=index, images=out / "images",
                           report=json.loads((out / "images" / "report.json").read_text()), bomb=bomb)


def test_f13_the_images_stage_refuses_the_png_undecoded_and_stays_small(stage):
    assert stage.result.returncode == 0, stage.result.stderr[-3000:]
    bomb = stage.index["cap-bomb"]
    assert (bomb["status"], bomb["reason"], bomb["shard"]) == ("failed", "too_many_pixel_values", None)
    assert "6,000x6,000 RGBA is 144,000,000 pixel values" in bomb["error"]
    assert {e: r["status"] for e, r in stage.index.items() if e != "cap-bomb"} == dict.fromkeys(
        ("cap-ok", "rep-10", "rep-11"), "ok")
    train = stage.report["tables"]["train"]
    assert train["balanced"] and train["reject_reasons"] == {"too_many_pixel_values": 1}
    assert stage.peak < 1.5 * GB  # decoding it took a worker to 3 GB


@pytest.fixture
def old_shards(stage, tmp_path):
    """The stage's images folder with rep-11's image replaced in its shard by the probe's PNG, as shards written
    before the bound (or with a larger one) may hold."""
    images = tmp_path / "images"
    shutil.copytree(stage.images, images)
    row = stage.index["rep-11"]
    shard = images / row["shard"]
    rewritten = io.BytesIO()
    with tarfile.open(shard) as src, tarfile.open(fileobj=rewritten, mode="w") as dst:
        for member in src:
            data = stage.bomb if member.name == f"{row['key']}.jpg" else src.extractfile(member).read()
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    shard.write_bytes(rewritten.getvalue())
    return images


def test_f13_reading_the_shards_back_refuses_the_png(old_shards):
    with open_images(str(old_shards)) as images:
        assert images["rep-10"].image.size == (96, 64)
        with pytest.raises(ValueError, match="144,000,000 pixel values"):
            images["rep-11"]


def replace_rows(numbers) -> list[dict]:
    return [schema_row("replace_eval", example_id=f"rep-{i}", source_index=i, image_path=f"VG_100K/{i}.jpg",
                       image_id=None, caption="a dog on a mat", hard_negative="a cat on a mat",
                       hard_positive="a dog on a rug") for i in numbers]


def run_evaluator(tmp_path, images, numbers) -> dict:
    data = write_run_folder(tmp_path / "data", "replace_eval", replace_rows(numbers))
    out = tmp_path / "out"
    assert evaluate.main(["--model=hardpos-tiny", "--pretrained=", f"--data={data}", f"--images={images}",
                          f"--out={out}", "--workers=0", "--bootstrap=0"]) == 0
    return json.loads((out / "eval.json").read_text())


def test_f13_the_evaluator_skips_the_png_in_shards(old_shards, tmp_path):
    result = run_evaluator(tmp_path, old_shards, (10, 11))
    assert result["scored"] == 1 and result["skip_reasons"] == {"image_too_large": 1}
    assert result["skipped_rows"][0]["example_id"] == "rep-11"


@pytest.fixture
def image_folder(bomb, tmp_path):
    root = tmp_path / "vg"
    (root / "VG_100K").mkdir(parents=True)
    (root / "VG_100K" / "10.jpg").write_bytes(jpeg(10, (96, 64)))
    (root / "VG_100K" / "11.jpg").write_bytes(bomb)  # named .jpg: the header, not the name, says what it is
    return root


def test_f13_the_evaluator_skips_the_png_in_a_folder(image_folder, tmp_path):
    result = run_evaluator(tmp_path, image_folder, (10, 11))
    assert result["scored"] == 1 and result["skip_reasons"] == {"image_too_large": 1}


def test_f13_the_trainer_skips_the_png(image_folder):
    rows = [{"example_id": f"cap-{i}", "image_path": f"VG_100K/{i}.jpg", "caption": "a dog", "hard_positive": "a hound",
             "hard_negative": "a cat"} for i in (10, 11)]
    dataset = TrainDataset(rows, [0, 1], str(image_folder), lambda image: image.size, seed=0)
    assert dataset[(0, 0)]["image"] == (96, 64)
    assert dataset[(0, 1)] == {"skip": "image too large", "example_id": "cap-11"}
    with pytest.raises(ValueError, match="144,000,000 pixel values"):
        ImageLookup(str(image_folder))({"example_id": "cap-11", "image_path": "VG_100K/11.jpg"})
