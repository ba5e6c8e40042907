"""The trainer on a corpus's own img2dataset output (webdataset tars, parquet shards with the image bytes), each
row's image found by its key: the same run as from the COCO folder holding the same images."""
import gzip
import io
import json
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import as_main, run_without_pipeline
from PIL import Image
from train_fixtures import (  # noqa: F401 (one_thread: an autouse fixture)
    CORRUPT,
    MISSING,
    N_ROWS,
    log_records,
    make_train_data,
    one_thread,
    run_args,
    train_row,
)

from pipeline.publish.image_shards import open_shard_folder
from pipeline.train import finetune
from pipeline.train.data import TrainDataset, load_rows
from pipeline.train.images import ImageLookup, ImageMissing
from tests.conftest import write_run_folder
from tests.image_fixtures import jpeg

STEPS = 3  # one epoch of the 24 rows at batch 8: every row asked for its image once
SKIPPED = {"image missing": len(MISSING), "image unreadable": len(CORRUPT)}
SHARDS = (range(0, 12), range(12, N_ROWS))
DUPLICATE = 3  # its key is in both tars: the first tar's image is the row's


def corpus_key(i: int) -> str:
    return f"{i:09d}"  # img2dataset's key: shard number and position


def corpus_row(i: int) -> dict:
    """train_row(i) as the pipeline writes it for an img2dataset corpus: its key, its URL, no COCO ids or file."""
    return {**train_row(i), "caption_id": None, "image_id": None, "key": corpus_key(i), "file_name": None,
            "image_url": f"http://images.example/{i}.jpg", "source_file": "00000.parquet"}


def write_webdataset(folder, images: dict[int, bytes]) -> None:
    """img2dataset's webdataset output: NNNNN.tar with <key>.jpg/.txt/.json per sample, NNNNN.parquet metadata
    (every attempt, failures included) and NNNNN_stats.json beside it."""
    folder.mkdir()
    for number, rows in enumerate(SHARDS):
        samples = [(corpus_key(i), images[i]) for i in rows if i in images]
        if number == 1:
            samples.append((corpus_key(DUPLICATE), jpeg(999, (40, 36))))
        with tarfile.open(folder / f"{number:05d}.tar", "w") as tar:
            for key, data in samples:
                meta = json.dumps({"key": key, "caption": "", "status": "success"}).encode()
                for suffix, payload in (("jpg", data), ("txt", b"a caption"), ("json", meta)):
                    member = tarfile.TarInfo(f"{key}.{suffix}")
                    member.size = len(payload)
                    tar.addfile(member, io.BytesIO(payload))
        keys = [corpus_key(i) for i in rows]
        pq.write_table(pa.table({"key": keys, "url": [f"http://images.example/{k}.jpg" for k in keys],
                                 "status": ["success" if int(k) in images else "failed_to_download" for k in keys]}),
                       folder / f"{number:05d}.parquet")
        (folder / f"{number:05d}_stats.json").write_text("{}")


def write_parquet_shards(folder, images: dict[int, bytes]) -> None:
    """img2dataset's parquet output: the bytes in its jpg column, a failed download's null, small row groups."""
    folder.mkdir()
    for number, rows in enumerate(SHARDS):
        rows = [i for i in rows if i != min(MISSING)]  # one missing image was never asked for, the other failed
        table = pa.table({"key": [corpus_key(i) for i in rows], "caption": ["a caption"] * len(rows),
                          "url": [f"http://images.example/{i}.jpg" for i in rows],
                          "status": ["success" if i in images else "failed_to_download" for i in rows],
                          "jpg": pa.array([images.get(i) for i in rows], pa.binary())})
        pq.write_table(table, folder / f"{number:05d}.parquet", row_group_size=5)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The trainer's fixture images (2 missing, 1 undecodable) as a COCO folder, as webdataset tars and as
    parquet shards, the train table with COCO rows and with the corpus's rows, and a run from the COCO folder."""
    root = tmp_path_factory.mktemp("corpus")
    data = make_train_data(root)
    images = {i: (data.images / "train2017" / f"{i:012d}.jpg").read_bytes() for i in range(N_ROWS)
              if i not in MISSING}
    write_webdataset(root / "webdataset", images)
    write_parquet_shards(root / "parquet", images)
    data.corpus_data = write_run_folder(root / "corpus_run", "train", [corpus_row(i) for i in range(N_ROWS)])
    data.reference = root / "from_coco"
    assert finetune.main(run_args(data, data.reference, f"--max_steps={STEPS}")) == 0
    return data


def corpus_args(corpus, images: str, out, *extra) -> list[str]:
    return [f"--data={corpus.corpus_data}", f"--images={corpus.images.parent / images}",
            *run_args(corpus, out, f"--max_steps={STEPS}", *extra)[2:]]


def assert_same_run(out, reference) -> None:
    """The same rows, images, skips and losses as the run from the COCO folder."""
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["images_skipped"] == SKIPPED
    assert sorted(summary["images_skipped_examples"]) == sorted(f"ex{i:03d}" for i in MISSING | CORRUPT)
    losses = [{k: r[k] for k in ("step", "batch", "clip", "hn", "hp", "total")} for r in log_records(out)]
    assert losses == [{k: r[k] for k in ("step", "batch", "clip", "hn", "hp", "total")}
                      for r in log_records(reference)]


def test_trains_from_webdataset_shards_without_beam_in_worker_processes(corpus, tmp_path):
    code = "import torch; torch.set_num_threads(1)\n" + as_main("pipeline.train.finetune")
    result = run_without_pipeline(code, *corpus_args(corpus, "webdataset", tmp_path, "--workers=2"))
    assert result.returncode == 0, result.stderr
    assert_same_run(tmp_path, corpus.reference)


def test_trains_from_parquet_shards_with_the_image_bytes(corpus, tmp_path):
    assert finetune.main(corpus_args(corpus, "parquet", tmp_path)) == 0
    assert_same_run(tmp_path, corpus.reference)


@pytest.mark.parametrize("shards", ["webdataset", "parquet"])
def test_a_key_in_no_shard_or_no_key_is_a_counted_skip(corpus, shards):
    table, indices, _ = load_rows(str(corpus.corpus_data), None, None)
    dataset = TrainDataset(table, indices, str(corpus.images.parent / shards), lambda image: image.size, seed=0)
    assert {i: dataset[(0, i)] for i in MISSING} == {i: {"skip": "image missing", "example_id": f"ex{i:03d}"}
                                                    for i in MISSING}
    lookup = ImageLookup(str(corpus.images.parent / shards))
    with pytest.raises(ImageMissing, match=f"key '000000099' is in none of the {shards} shards"):
        lookup({**corpus_row(0), "key": "000000099"})
    with pytest.raises(ImageMissing, match="the row has no key"):
        lookup({**corpus_row(0), "key": None, "file_name": "000000000000.jpg"})  # no fallback to files


def test_the_key_matched_image_is_the_tar_members_bytes(corpus):
    folder = corpus.images.parent / "webdataset"
    members = {}
    for tar_path in sorted(folder.glob("*.tar")):
        with tarfile.open(tar_path) as tar:
            for member in tar:
                if member.name.endswith(".jpg"):
                    members.setdefault(member.name[:-4], tar.extractfile(member).read())  # the first tar's first
    shards = open_shard_folder(str(folder))
    assert len(shards) == len(members) == N_ROWS - len(MISSING)
    assert all(shards.get(key) == data for key, data in members.items())
    assert shards.get(corpus_key(DUPLICATE)) == jpeg(DUPLICATE, (40, 36)) != jpeg(999, (40, 36))
    image = ImageLookup(str(folder))(corpus_row(DUPLICATE))
    assert image.tobytes() == Image.open(io.BytesIO(members[corpus_key(DUPLICATE)])).convert("RGB").tobytes()


def test_shards_that_cannot_be_read_are_one_line(corpus, tmp_path, capsys):
    compressed, keyless, captions_only = tmp_path / "compressed", tmp_path / "keyless", tmp_path / "captions_only"
    for folder in (compressed, keyless, captions_only):
        folder.mkdir()
    (compressed / "00000.tar").write_bytes(gzip.compress((corpus.images.parent / "webdataset" / "00000.tar")
                                                         .read_bytes()))
    pq.write_table(pa.table({"id": ["a"], "jpg": pa.array([jpeg(0)], pa.binary())}), keyless / "00000.parquet")
    with tarfile.open(captions_only / "00000.tar", "w") as tar:
        member = tarfile.TarInfo("000000000.txt")
        member.size = 9
        tar.addfile(member, io.BytesIO(b"a caption"))
    for folder, message in ((compressed, "00000.tar: not an uncompressed tar"),
                            (keyless, "00000.parquet: no column 'key' (columns: id, jpg)"),
                            (captions_only, "captions_only: its 1 webdataset shards hold no image")):
        capsys.readouterr()
        assert finetune.main(corpus_args(corpus, folder, tmp_path / f"out_{folder.name}")) == 2
        err = capsys.readouterr().err  # after the table's loading progress, if any: the one line
        error = err[err.index("error: "):].rstrip("\n")
        assert error.startswith("error: --images: ") and message in error and "\n" not in error, err
