"""The fifth hostile probe (issue 42) on the corpus readers: every case that failed on cd18f06, each ending now as
docs/corpora.md promises: an accounted record (read = rows + discarded + rejected), a one-line error (exit 2), or
the same result whatever the spelling, format or line break of the same input."""
from __future__ import annotations

import io
import json
import os
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.perturb.outcomes import Reject
from pipeline.publish.image_shards import parquet_images, tar_images
from pipeline.run import main
from pipeline.sources import coco, corpus
from pipeline.sources.files import LongLine, bounded_lines
from tests.conftest import rows_of
from tests.test_round4 import KEYS, fates, one_error, rows, run, section, write_csv


def raw_records(path, fmt: str, start: int = 0, end: int | None = None, **columns) -> list:
    """(position, record or Reject) of a file read as a worker reads one unit of it (no pipeline)."""
    size = os.path.getsize(path)
    unit = corpus.Unit(corpus.InputFile(str(path), os.path.basename(path), fmt, size), start,
                       size if end is None and fmt == "jsonl" else (end or 0))
    return list(corpus._raw_records(unit, corpus.Columns(**columns)))


# ------------------------------------------------------------------------------------------- webdataset tars

def sample_tar(n: int) -> tuple[bytes, list[int]]:
    """An uncompressed webdataset tar of n samples (k.jpg, k.txt, k.json) as Python's tarfile writes it (two zero
    blocks, then zeros to a 10 KiB record), and the byte offset of each sample's first header."""
    raw, starts = io.BytesIO(), []
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for r in rows(n):
            starts.append(raw.tell())
            for suffix, data in (("jpg", b"\xff\xd8 not decoded"), ("txt", r["caption"].encode()),
                                 ("json", json.dumps({"url": r["url"]}).encode())):
                info = tarfile.TarInfo(f"{r['key']}.{suffix}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return raw.getvalue(), starts


def damaged(data: bytes, at: int) -> bytes:
    """The tar with the checksum of the header at `at` broken (one 512-byte header damaged)."""
    out = bytearray(data)
    out[at + 148:at + 156] = b"0000000\0"
    return bytes(out)


def tar_cases() -> dict[str, tuple[bytes, int, str]]:
    """name -> (tar bytes, samples given, what the bad_tar says)."""
    data, starts = sample_tar(8)
    half, _ = sample_tar(4)
    end_of_members = len(data) - len(data.rstrip(b"\0"))  # the zeros after the last member
    last = len(data) - end_of_members
    last += -last % 512
    return {
        # M1: sample 5's first header damaged: tarfile stopped there without a word, 3 of 8 samples lost
        "damaged_header": (damaged(data, starts[5]), 4, "a damaged header"),
        # M2: cut at a header boundary (a writer killed between members)
        "cut_between_members": (data[:starts[6]], 5, "without an end-of-archive marker"),
        "cut_inside_a_header": (data[:starts[6] + 100], 5, "inside the header"),
        "one_zero_block": (data[:last + 512], 8, "one zero block of two"),
        # M3: two tars written one after the other (cat a.tar b.tar): the second one's samples were never read
        "two_tars": (half + half, 4, "data after the end-of-archive marker"),
    }


@pytest.mark.parametrize("case", sorted(tar_cases()))
def test_m1_m2_m3_a_tar_that_does_not_end_as_a_tar_ends_in_bad_tar(tmp_path, case):
    """cd18f06: tarfile's next() returns None, silently, at a damaged header, at a file cut short between members
    and at the first end-of-archive marker; 20 of 30 samples (M1), the last samples of a cut tar (M2) and a whole
    second tar (M3) vanished, exit 0, balanced. Now the samples before the damage are read and the rest is one
    bad_tar saying what is wrong; the sample under way where a tar is cut or damaged may lack members, and is part
    of the bad_tar."""
    data, given, says = tar_cases()[case]
    path = tmp_path / "00000.tar"
    path.write_bytes(data)
    found = raw_records(path, "webdataset")
    assert [raw["key"] for _, raw in found[:-1]] == KEYS[:given]
    assert isinstance(found[-1][1], Reject) and found[-1][1].reason == "bad_tar"
    assert says in found[-1][1].detail
    # the trainer's index reads the same samples (the key of a sample past the damage gives no image)
    assert [key for key, *_ in tar_images(str(path))] == KEYS[:given]


def test_m1_a_tar_that_ends_as_a_tar_is_read_whole(tmp_path):
    """Python's and GNU tar's end (two zero blocks, then zeros to the record), and an empty tar: no bad_tar."""
    data, _ = sample_tar(8)
    for name, body in (("python", data), ("padded", data + b"\0" * 20480), ("empty", b"\0" * 10240)):
        (tmp_path / f"{name}.tar").write_bytes(body)
        found = raw_records(tmp_path / f"{name}.tar", "webdataset")
        assert not any(isinstance(raw, Reject) for _, raw in found), (name, found[-1])
        assert len(found) == (0 if name == "empty" else 8)


def test_m1_a_damaged_tar_is_accounted_for_in_the_report(tmp_path):
    data, starts = sample_tar(8)
    (tmp_path / "00000.tar").write_bytes(damaged(data, starts[5]))
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/00000.tar") == 0
    assert section(out)["read"] == 5 and section(out)["balanced"]
    assert section(out)["reject_reasons"] == {"bad_tar": 1}
    [letter] = rows_of(out, "rejected")
    assert "byte" in letter["detail"] and repr(KEYS[4]) in letter["detail"]


# --------------------------------------------------------------------------------------- keys and file names

def test_m21_a_key_in_a_coco_file_and_a_jsonl_file_is_one_record(tmp_path):
    """cd18f06 grouped records by example_id, ("coco", id) for a COCO file and ("captions", key) for the others:
    the same key in both became two rows, 0 duplicate_key. A key is the corpus's, whatever the file's format."""
    records = rows(6)
    images = [{"id": 100 + i, "file_name": f"{100 + i:012d}.jpg"} for i in range(6)]
    annotations = [{"id": 38 + i, "image_id": 100 + i, "caption": r["caption"]} for i, r in enumerate(records)]
    (tmp_path / "a.json").write_text(json.dumps({"images": images, "annotations": annotations}))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({**r, "key": str(38 + i)}) + "\n"
                                              for i, r in enumerate(records[:4])))
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/a.json,{tmp_path}/b.jsonl") == 0
    assert section(out)["read"] == 10 and section(out)["balanced"]
    assert section(out)["reject_reasons"] == {"duplicate_key": 4}
    assert {letter["source_file"] for letter in rows_of(out, "rejected")} == {"b.jsonl"}  # a.json's come first
    made = rows_of(out, "train_negatives")
    assert made and {r["source_file"] for r in made} == {"a.json"}


def test_m24_a_file_named_twice_is_read_once(tmp_path, monkeypatch):
    """--captions=x.jsonl --captions=./x.jsonl (or a link to it): cd18f06 read the file twice, reported 24 read
    of a 12-record file and rejected 12 of its records as duplicates of themselves."""
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows(12)))
    os.symlink(path, tmp_path / "link.jsonl")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert run(out, f"--captions={path}", f"--captions={tmp_path}/./c.jsonl", "--captions=c.jsonl",
               f"--captions={tmp_path}/link.jsonl") == 0
    assert section(out)["read"] == 12 and section(out)["rejected"] == 0 and section(out)["balanced"]
    assert list(section(out)["files"]) == ["c.jsonl"]


# ---------------------------------------------------------------------------------------- fields and lines

@pytest.mark.parametrize("suffix", ["csv", "tsv"])
def test_m26_a_line_break_of_cr_alone_inside_a_body_line_is_refused_not_merged(tmp_path, suffix):
    """A caption-only file (--id_column=caption) whose header ends in LF and whose body is in old-Mac CR line
    breaks: cd18f06 checked only the header and made the 12 captions one record (and 2 negatives of it). That
    line is now cr_line_break; the lines around it are read."""
    path = tmp_path / f"c.{suffix}"
    captions = [r["caption"].replace(",", "") for r in rows(12)]
    path.write_bytes(("caption\n" + captions[0] + "\n" + "\r".join(captions[1:11]) + "\r\n" + captions[11]
                      + "\n").encode())
    found = raw_records(path, "csv", key="caption")
    assert [n for n, _ in found] == [2, 3, 4]
    assert [raw["caption"] for n, raw in found if n != 3] == [captions[0], captions[11]]
    assert isinstance(found[1][1], Reject) and found[1][1].reason == "cr_line_break"


def test_m26_the_whole_file_in_cr_line_breaks_is_refused_before_any_work(tmp_path, capsys):
    write_csv(tmp_path / "c.csv", "key,caption", [f"{r['key']},x" for r in rows(3)], newline="\r")
    assert run(tmp_path / "out", f"--captions={tmp_path}/c.csv") == 2
    assert "CR alone" in one_error(capsys)


def test_m27_a_null_img2dataset_status_is_not_a_success(tmp_path):
    """cd18f06 took a null status (a row img2dataset never fetched) as success: the row became a training row, and
    the trainer's parquet index gave it an image. Now it is unknown_status, and the index leaves it out."""
    records = [{**r, "status": "success", "error_message": None} for r in rows(6)]
    records[1]["status"] = records[4]["status"] = None
    records[2].update(status="failed_to_download", error_message="HTTP Error 404")
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "00000.parquet")
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/00000.parquet") == 0
    assert section(out)["read"] == 6 and section(out)["balanced"]
    assert section(out)["reject_reasons"] == {"unknown_status": 2}
    assert section(out)["discard_reasons"].get("image_not_downloaded") == 1
    assert fates(out)[KEYS[1]] == fates(out)[KEYS[4]] == ["unknown_status"]
    assert "null" in next(letter["detail"] for letter in rows_of(out, "rejected"))
    shards = [{**r, "jpg": b"\xff\xd8"} for r in records]
    pq.write_table(pa.Table.from_pylist(shards), tmp_path / "shard.parquet")
    assert [key for key, *_ in parquet_images(str(tmp_path / "shard.parquet"))] == [KEYS[0], KEYS[3], KEYS[5]]


def test_m32_an_image_reference_of_the_wrong_type_is_rejected_not_dropped(tmp_path):
    """url 12345, a list of two URLs, an object, true, "", 1.5, [""]: cd18f06 made rows of them with no image
    reference (the trainer then matched them by key alone). Now bad_image; a null or missing url is no reference,
    as an empty CSV field is; a Parquet list column is rejected too (never made into Python objects)."""
    wrong = [12345, ["http://a/1.jpg", "http://a/2.jpg"], {"href": "http://a/1.jpg"}, True, "", "  ", 1.5, [""]]
    records = rows(len(wrong) + 2)
    for r, url in zip(records, wrong, strict=False):
        r["url"] = url
    records[-2]["url"] = None
    del records[-1]["url"]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_csv(tmp_path / "b.csv", "key,caption,url", ["c1,A dog on a couch.,", "c2,A cat on a bed.,http://c/2.jpg"])
    pq.write_table(pa.table({"key": ["p1"], "caption": ["A red car."], "url": pa.array([["http://p/1"]])}),
                   tmp_path / "c.parquet")
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/a.jsonl,{tmp_path}/b.csv,{tmp_path}/c.parquet") == 0
    assert section(out)["read"] == len(records) + 3 and section(out)["balanced"]
    assert section(out)["reject_reasons"] == {"bad_image": len(wrong) + 1}
    got = fates(out)
    assert all(got[KEYS[i]] == ["bad_image"] for i in range(len(wrong))) and got["p1"] == ["bad_image"]
    assert "bad_image" not in got[KEYS[len(wrong)]] + got[KEYS[len(wrong) + 1]] + got["c1"] + got["c2"]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
def test_m33_the_line_break_does_not_count_toward_max_record_bytes(tmp_path, newline):
    """cd18f06 accepted a record of exactly --max_record_bytes with LF and rejected it as record_too_large with
    CRLF (the CR counted). The bound is the record's, whatever its line break; a byte more is too large."""
    limit = 1024
    record = lambda key, size: (b'{"key": "%s", "caption": "' % key.encode()).ljust(size - 2, b"a") + b'"}'  # noqa
    data = newline.join([record("k0", limit), record("k1", limit + 1), record("k2", limit), b""])
    (tmp_path / "c.jsonl").write_bytes(data)
    units = corpus.Unit(corpus.InputFile(str(tmp_path / "c.jsonl"), "c.jsonl", "jsonl", len(data)), 0, len(data))
    bounds = corpus.InputBounds(max_record_bytes=limit)
    got = [raw for _, raw in corpus._raw_records(units, corpus.Columns(), bounds)]
    assert [raw["key"] if isinstance(raw, dict) else raw.reason for raw in got] == ["k0", "record_too_large", "k2"]
    lines = list(bounded_lines(io.BytesIO(data), 0, len(data), limit))
    assert [len(line) if isinstance(line, bytes) else "long" for _, line in lines] == [limit, "long", limit]
    csv = b"key,caption" + newline + b"k0," + b"a" * (limit - 3) + newline + b"k1," + b"a" * (limit - 2) + newline
    (tmp_path / "c.csv").write_bytes(csv)
    unit = corpus.Unit(corpus.InputFile(str(tmp_path / "c.csv"), "c.csv", "csv", len(csv)))
    got = [raw for _, raw in corpus._raw_records(unit, corpus.Columns(), bounds)]
    assert [raw["key"] if isinstance(raw, dict) else raw.reason for raw in got] == ["k0", "record_too_large"]


def test_m42_a_coco_file_naming_a_member_twice_is_refused_with_one_line(tmp_path, capsys):
    """A hand-merged COCO file with "annotations" twice: json keeps the last, and cd18f06 lost the first 5
    captions without a count. The file is refused (one line, exit 2), and where only a worker parses it (past
    the launcher's 256 MiB) it is a malformed_file dead letter; an annotation or image entry naming a field twice
    is repeated_field, never one of the two taken."""
    images = [{"id": i, "file_name": f"{i}.jpg"} for i in range(4)]
    first = [{"id": 10 + i, "image_id": i, "caption": r["caption"]} for i, r in enumerate(rows(2))]
    second = [{"id": 20 + i, "image_id": 2 + i, "caption": r["caption"]} for i, r in enumerate(rows(2))]
    text = (f'{{"images": {json.dumps(images)}, "annotations": {json.dumps(first)}, '
            f'"annotations": {json.dumps(second)}}}')
    (tmp_path / "c.json").write_text(text)
    assert run(tmp_path / "out", f"--coco_captions={tmp_path}/c.json") == 2
    assert "'annotations' twice" in one_error(capsys)
    with pytest.raises(coco.InputFileError, match="annotations"):
        coco.load_captions_file(str(tmp_path / "c.json"))
    from pipeline.sources.files import fields_of

    index = coco.image_index(json.loads('[{"id": 1, "file_name": "a.jpg", "file_name": "b.jpg"}, '
                                        '{"id": 2, "file_name": "c.jpg"}]', object_pairs_hook=fields_of))
    annotation = json.loads('{"id": 5, "image_id": 2, "caption": "a dog", "caption": "a cat"}',
                            object_pairs_hook=fields_of)
    for raw, images_of in ((annotation, index), ({"id": 6, "image_id": 1, "caption": "a dog"}, index)):
        with pytest.raises(Reject) as e:
            coco.normalise(raw, "c.json", images_of)
        assert e.value.reason == "repeated_field"
    assert coco.normalise({"id": 7, "image_id": 2, "caption": "a dog"}, "c.json", index)["file_name"] == "c.jpg"


# ------------------------------------------------------------------------------------------------ read time

def test_m43_a_line_spanning_many_ranges_is_read_once_not_once_per_range(tmp_path):
    """A NUL-filled .jsonl with no line break: each 64 MiB range read from its start to the end of the line under
    way, i.e. to the end of the file (3 GiB: 80 s, 7x the 1 GiB time). Now a range reads at most its own bytes
    to find its first line; the long line is read once, by the range it begins in. Here 32 ranges of 256 KiB
    over an 8 MiB line: about 17 times the file was read before, at most twice now."""
    path = tmp_path / "long.jsonl"
    size = 8 << 20
    tail = json.dumps(rows(1)[0]).encode() + b"\n"
    path.write_bytes(b"\0" * size + b"\n" + tail)
    total, read = path.stat().st_size, [0]

    class Counting:
        def __init__(self, f):
            self.f = f

        def seek(self, offset):
            return self.f.seek(offset)

        def readline(self, limit=-1):
            line = self.f.readline(limit)
            read[0] += len(line)
            return line

    step, found = 256 << 10, []
    for start in range(0, total, step):
        with open(path, "rb") as f:
            found += [(offset, line.size if isinstance(line, LongLine) else line)
                      for offset, line in bounded_lines(Counting(f), start, min(start + step, total), 1024)]
    assert found == [(0, size + 1), (size + 1, tail[:-1])]
    assert read[0] <= 2 * total
