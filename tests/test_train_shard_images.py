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
STRAY = 3  # a stray image with its key and no caption opens the first tar: never the row's image (N32)


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
        with tarfile.open(folder / f"{number:05d}.tar", "w") as tar:
            if number == 0:
                add_member(tar, f"{corpus_key(STRAY)}.jpg", jpeg(999, (40, 36)))
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


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(data)
    tar.addfile(member, io.BytesIO(data))


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
    table, indices, *_ = load_rows(str(corpus.corpus_data), None, None)
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
            names = tar.getnames()
            for member in tar:
                if member.name.endswith(".jpg") and member.name[:-4] + ".txt" in names:
                    members[member.name[:-4]] = tar.extractfile(member).read()
    shards = open_shard_folder(str(folder))
    assert len(shards) == len(members) == N_ROWS - len(MISSING)
    assert all(shards.get(key) == data for key, data in members.items())
    # N32: 46709a5's index gave the stray image (the first member of its key) to the caption's row
    assert shards.get(corpus_key(STRAY)) == jpeg(STRAY, (40, 36)) != jpeg(999, (40, 36))
    image = ImageLookup(str(folder))(corpus_row(STRAY))
    assert image.tobytes() == Image.open(io.BytesIO(members[corpus_key(STRAY)])).convert("RGB").tobytes()


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


def sample_image(i: int) -> bytes:
    return jpeg(1000 + i, (16, 12))


def read_corpus_tar(path) -> list[dict]:
    """The records the corpus reader makes of a webdataset tar (rejected ones as None)."""
    from pipeline.perturb.outcomes import Reject
    from pipeline.sources import corpus as corpus_reader

    unit = corpus_reader.Unit(corpus_reader.InputFile(str(path), path.name, "webdataset", path.stat().st_size))
    records = []
    for i, raw in corpus_reader._raw_records(unit, corpus_reader.Columns()):
        try:
            records.append(None if isinstance(raw, Reject) else
                           corpus_reader.normalise(raw, path.name, i, corpus_reader.Columns()))
        except Reject:
            records.append(None)
    return records


def test_n30_a_resharded_webdataset_rows_find_their_own_samples_image(tmp_path):
    """Re-sharded sets renumber their members and keep the old key in the .json: here each sample's .json key is
    the next sample's member name. 46709a5's reader took the .json's key and the trainer's index the member name,
    so every row trained on another sample's image, with no image skipped. Now both take the sample's name."""
    folder = tmp_path / "resharded"
    folder.mkdir()
    with tarfile.open(folder / "00000.tar", "w") as tar:
        for i in range(6):
            meta = {"key": f"{(i + 1) % 6:09d}", "url": f"http://images.example/{i}.jpg"}
            for suffix, data in (("jpg", sample_image(i)), ("txt", f"caption of sample {i}".encode()),
                                 ("json", json.dumps(meta).encode())):
                add_member(tar, f"{i:09d}.{suffix}", data)
    records = read_corpus_tar(folder / "00000.tar")
    shards, lookup = open_shard_folder(str(folder)), ImageLookup(str(folder))
    for record in records:
        i = int(record["caption"].rsplit(" ", 1)[1])
        assert shards.get(record["key"]) == sample_image(i), record
        expected = Image.open(io.BytesIO(sample_image(i))).convert("RGB").tobytes()
        assert lookup({**record, "example_id": record["example_id"]}).tobytes() == expected


def test_n32_a_key_two_samples_hold_or_a_url_not_the_rows_gives_no_image(tmp_path):
    """Where the reader and the index meet, the image must be the row's: a key held by a stray sample whose
    caption the reader rejects (an empty .txt) and by a real one is refused (the reader keeps the first record it
    accepts, which the index cannot know), and so is a sample whose URL is not the row's. Each is a counted skip,
    never a wrong image."""
    folder = tmp_path / "shards"
    folder.mkdir()
    with tarfile.open(folder / "00000.tar", "w") as tar:
        for suffix, data in (("jpg", sample_image(99)), ("txt", b" ")):  # rejected by the reader: empty caption
            add_member(tar, f"stray/000000001.{suffix}", data)
        for i in range(3):
            for suffix, data in (("jpg", sample_image(i)), ("txt", f"caption {i}".encode()),
                                 ("json", json.dumps({"url": f"http://images.example/{i}.jpg"}).encode())):
                add_member(tar, f"{i:09d}.{suffix}", data)
    records = [r for r in read_corpus_tar(folder / "00000.tar") if r is not None]
    assert [r["key"] for r in records] == ["000000000", "000000001", "000000002"]
    lookup = ImageLookup(str(folder))
    with pytest.raises(ImageMissing, match="held by more than one sample"):  # ImageOfAnotherRow
        lookup(records[1])
    with pytest.raises(ImageMissing, match="another URL"):
        lookup({**records[2], "image_url": "http://images.example/0.jpg"})
    assert lookup(records[2]).size == (16, 12)
    import datasets

    table = datasets.Dataset.from_list([{**r, "hard_positive": "p", "hard_negative": "n"} for r in records])
    dataset = TrainDataset(table, [0, 1, 2], str(folder), lambda image: image.size, seed=0)
    assert dataset[(0, 1)] == {"skip": "image of another row", "example_id": records[1]["example_id"]}
    assert dataset[(0, 0)]["image"] == (16, 12)


def test_n7_a_sample_of_links_is_rejected_by_the_reader_and_never_indexed(tmp_path):
    """A sample whose only member is a symbolic link: 46709a5's reader skipped it without a count (36 of 37
    read). Now it is a rejected record, and the index never follows the link."""
    folder = tmp_path / "links"
    folder.mkdir()
    with tarfile.open(folder / "00000.tar", "w") as tar:
        for suffix, data in (("jpg", sample_image(0)), ("txt", b"a caption")):
            add_member(tar, f"000000000.{suffix}", data)
        link = tarfile.TarInfo("000000001.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    records = read_corpus_tar(folder / "00000.tar")
    assert len(records) == 2 and records[0]["key"] == "000000000" and records[1] is None
    from pipeline.sources import corpus as corpus_reader

    unit = corpus_reader.Unit(corpus_reader.InputFile(str(folder / "00000.tar"), "00000.tar", "webdataset", 0))
    rejected = [raw for _, raw in corpus_reader._raw_records(unit, corpus_reader.Columns())
                if isinstance(raw, Exception)]
    assert [(r.reason, "symbolic link" in r.detail) for r in rejected] == [("not_a_regular_file", True)]
    assert len(open_shard_folder(str(folder))) == 1
