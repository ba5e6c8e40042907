"""Any caption corpus (issue 36): img2dataset's parquet and webdataset shards, Parquet, JSONL and CSV files, many
files by pattern; string keys kept with every row; failed downloads discarded with their reason; every file and
record accounted for; reading split into units any worker may take; --reference_captions for the statistics."""
from __future__ import annotations

import csv
import io
import json
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from pipeline.run import main
from pipeline.sources import corpus
from tests.conftest import one_error_line, report, rows_of, run_cli

CAPTIONS = ["A dog sitting on a couch.", "A man riding a horse on a beach.", "Two cats sleeping on a bed.",
            "A red car parked next to a tree.", "A woman holding an umbrella in the rain.",
            "A plate of food on a wooden table.", "A bus driving down a city street.",
            "A boy throwing a frisbee in a park.", "A large elephant standing in a field.",
            "A kitchen with a stove and a refrigerator."]


def records(n: int = 10, start: int = 0, failed=()) -> list[dict]:
    return [{"key": f"k{start + i:05d}", "caption": CAPTIONS[i % len(CAPTIONS)] if i < len(CAPTIONS) else
             f"A dog number {i} on a couch.", "url": f"http://img.example/{start + i}.jpg",
             "status": "failed_to_download" if i in failed else "success",
             "error_message": "HTTP Error 404" if i in failed else None} for i in range(n)]


def jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (120, 30, 200)).save(out, "JPEG")
    return out.getvalue()


def write_tar(path, rows, image=True, prefix=""):
    with tarfile.open(path, "w") as tar:
        for r in rows:
            members = [("txt", r["caption"].encode()), ("json", json.dumps({"key": r["key"], "url": r["url"]}).encode())]
            if image:
                members.insert(0, ("jpg", jpeg()))
            for ext, data in members:
                info = tarfile.TarInfo(f"{prefix}{r['key']}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def run(out, *flags, stage="train_negatives"):
    return main([f"--stage={stage}", f"--output_dir={out}", "--progress_seconds=0", *flags])


def test_img2dataset_parquet_shards_string_keys_and_failed_downloads(tmp_path):
    pq.write_table(pa.Table.from_pylist(records(10, 0, failed={3})), tmp_path / "00000.parquet", row_group_size=4)
    pq.write_table(pa.Table.from_pylist(records(10, 10)), tmp_path / "00001.parquet", row_group_size=4)
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/*.parquet", stage="hard_positives") == 0
    section = report(out)["tables"]["hard_positives"]
    assert section["balanced"] and section["read"] == 20
    assert section["files"]["00000.parquet"]["read"] == 10 and section["files"]["00001.parquet"]["read"] == 10
    assert section["discard_reasons"]["image_not_downloaded"] == 1
    letters = rows_of(out, "discarded")
    failed = [r for r in letters if r["reason"] == "image_not_downloaded"]
    assert len(failed) == 1 and "HTTP Error 404" in failed[0]["detail"] and failed[0]["source_file"] == "00000.parquet"
    rows = rows_of(out, "hard_positives")
    assert rows and all(r["key"].startswith("k") and r["caption_id"] is None and r["image_url"].startswith("http")
                        for r in rows)
    assert "k00003" not in {r["key"] for r in rows}


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "tsv", "webdataset", "webdataset_dot_slash"])
def test_jsonl_csv_and_webdataset_give_the_same_rows(tmp_path, fmt):
    """tsv: tab-separated, header included; webdataset_dot_slash: a tar made with `tar cf x.tar .` (members
    "./k00000.jpg"), whose samples are the same as without the "./"."""
    rows = [{k: r[k] for k in ("key", "caption", "url")} for r in records(10)]
    path = tmp_path / {"jsonl": "c.jsonl", "csv": "c.csv", "tsv": "c.tsv"}.get(fmt, "00000.tar")
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt in ("csv", "tsv"):
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["key", "caption", "url"], dialect="excel-tab" if fmt == "tsv"
                                    else "excel")
            writer.writeheader()
            writer.writerows(rows)
    else:
        write_tar(path, rows, prefix="./" if fmt == "webdataset_dot_slash" else "")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "same.parquet")
    got = {}
    for name, source in ((fmt, path), ("parquet", tmp_path / "same.parquet")):
        out = tmp_path / f"out_{name}"
        assert run(out, f"--captions={source}", stage="hard_positives") == 0
        got[name] = sorted((r["key"], r["caption"], r["hard_positive"]) for r in rows_of(out, "hard_positives"))
        assert report(out)["tables"]["hard_positives"]["read"] == 10
    assert got[fmt] == got["parquet"] and got[fmt]


def test_malformed_records_and_repeated_keys_are_dead_letters_per_file(tmp_path):
    good = [{k: r[k] for k in ("key", "caption", "url")} for r in records(6)]
    lines = [json.dumps(r) for r in good] + ["not json", json.dumps({"key": "", "caption": "x"}),
                                             json.dumps({"key": "k99999", "caption": 5})]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps(good[0]) + "\n")  # k00000 again, in another file
    out = tmp_path / "out"
    # a comma-separated list, spaces after its commas allowed
    assert run(out, f"--captions={tmp_path}/a.jsonl, {tmp_path}/b.jsonl", stage="hard_positives") == 0
    section = report(out)["tables"]["hard_positives"]
    assert section["balanced"] and section["files"]["a.jsonl"]["read"] == 9 and section["files"]["b.jsonl"]["read"] == 1
    assert section["reject_reasons"] == {"bad_caption": 1, "bad_key": 1, "duplicate_key": 1, "not_json": 1}
    duplicate = next(r for r in rows_of(out, "rejected") if r["reason"] == "duplicate_key")
    assert duplicate["source_file"] == "b.jsonl"  # the first of a key (by file, then position) is kept


def test_a_jsonl_file_read_in_ranges_gives_every_line_once(tmp_path):
    lines = [json.dumps({"key": f"k{i}", "caption": "x" * (i % 37 + 1)}) + "\n" for i in range(500)]
    data = "".join(lines).encode()
    path = str(tmp_path / "ranges.jsonl")
    with open(path, "wb") as f:
        f.write(data)
    whole = corpus.InputFile(path, "r.jsonl", "jsonl", len(data))
    for size in (97, 1000, 4096, len(data)):
        units = [corpus.Unit(whole, s, min(s + size, len(data))) for s in range(0, len(data), size)]
        keys = [raw["key"] for u in units for _, raw in corpus._raw_records(u, corpus.Columns())]
        assert keys == [f"k{i}" for i in range(500)], size


def test_a_parquet_file_is_read_in_units_of_row_groups(tmp_path, monkeypatch):
    """Row groups are gathered until a unit holds UNIT_ROWS rows; each unit knows its first row's position."""
    monkeypatch.setattr(corpus, "UNIT_ROWS", 4)
    pq.write_table(pa.Table.from_pylist(records(10)), tmp_path / "s.parquet", row_group_size=3)
    [f] = [corpus.InputFile(str(tmp_path / "s.parquet"), "s.parquet", "img2dataset", 0)]
    units = corpus.units([f])
    assert [(u.start, u.end, u.first_row) for u in units] == [(0, 2, 0), (2, 4, 6)]
    positions = [i for u in units for i, _ in corpus._raw_records(u, corpus.Columns())]
    assert positions == list(range(10))


def test_patterns_formats_and_columns_are_checked_before_any_work(tmp_path):
    pq.write_table(pa.Table.from_pylist([{"id": "a", "text": "A dog."}]), tmp_path / "x.parquet")
    cases = [([f"--captions={tmp_path}/none-*.jsonl"], "no file matches"),
             ([f"--captions={tmp_path}/x.parquet"], "no column 'caption'"),
             ([f"--captions={tmp_path}/x.parquet", "--caption_column=text"], "no column 'key'"),
             ([f"--captions={tmp_path}/x.parquet", "--coco_captions=setup.py"], "give one")]
    for flags, expected in cases:
        done = run_cli("--stage=train_negatives", f"--output_dir={tmp_path / 'o'}", *flags)
        assert expected in one_error_line(done), flags
    out = tmp_path / "ok"
    assert run(out, f"--captions={tmp_path}/x.parquet", "--caption_column=text", "--id_column=id",
               "--allow_empty") == 0
    assert report(out)["tables"]["train_negatives"]["read"] == 1


def test_reference_captions_feed_the_statistics_never_the_rows(tmp_path):
    # "cat" is a replacement only once the corpus has seen it (twice): the input alone never has
    (tmp_path / "input.jsonl").write_text(json.dumps({"key": "only", "caption": "A dog sitting on a couch."}) + "\n")
    (tmp_path / "ref.jsonl").write_text("".join(json.dumps({"key": f"r{i}", "caption": c}) + "\n" for i, c in
                                                enumerate(["A cat sitting on a bed.", "A cat on a chair."] * 3)))
    alone, with_ref = tmp_path / "alone", tmp_path / "ref"
    assert run(alone, f"--captions={tmp_path}/input.jsonl", "--negative_types=replace", "--allow_empty") == 0
    assert run(with_ref, f"--captions={tmp_path}/input.jsonl", "--negative_types=replace",
               f"--reference_captions={tmp_path}/ref.jsonl") == 0
    assert not any("cat" in r["hard_negative"] for r in rows_of(alone, "train_negatives"))
    rows = rows_of(with_ref, "train_negatives")
    assert {r["key"] for r in rows} == {"only"} and any("cat" in r["hard_negative"] for r in rows)
    assert report(with_ref)["tables"]["train_negatives"]["read"] == 1
    # the rows depend on the reference: its fingerprint is recorded with what the table was made from
    made_from = report(with_ref)["tables"]["train_negatives"]["made_from"]
    assert made_from["reference_captions"] == corpus.fingerprint(None, corpus.reference_files(
        type("Opts", (), {"reference_captions": [f"{tmp_path}/ref.jsonl"], "captions_format": "auto",
                          "caption_column": "caption", "id_column": "key", "image_column": "url"})()))
    assert "reference_captions" not in report(alone)["tables"]["train_negatives"]["made_from"]


def test_the_launcher_reads_each_footer_once_per_version_of_the_file(tmp_path, monkeypatch):
    """A run lists its corpus many times (the checks, the fingerprint, the totals, the read units; again per stage
    of --stage=all): 21 footer reads per file on 282673d. Each version of a file is read once; a file rewritten
    is read again, so a check never passes on what the file was."""
    from pipeline.run import parse

    for i in range(3):
        pq.write_table(pa.Table.from_pylist(records(10, 10 * i)), tmp_path / f"{i:05d}.parquet", row_group_size=4)
    opened = []
    real = pq.ParquetFile
    monkeypatch.setattr(pq, "ParquetFile", lambda source, *a, **k: opened.append(source) or real(source, *a, **k))
    _, opts = parse(["--stage=train_negatives", f"--captions={tmp_path}/*.parquet", f"--output_dir={tmp_path}/out"])
    for _ in range(3):
        files = corpus.input_files(opts)
        assert [u.end for u in corpus.units(files)] == [3] * 3
        assert corpus.expected_records(opts) == 30
        corpus.fingerprint(opts, files)
    assert len(opened) == 3

    pq.write_table(pa.Table.from_pylist([{k: v for k, v in r.items() if k != "caption"} for r in records(10)]),
                   tmp_path / "00001.parquet")
    with pytest.raises(corpus.UsageError, match="00001.parquet: no column 'caption'"):
        corpus.input_files(opts)
    assert len(opened) == 4
