"""The fourth hostile probe (issue 42) on the corpus readers and the launcher: every case that failed on 46709a5,
each ending now as the docs promise: an accounted record (read = rows + discarded + rejected), a one-line error
(exit 2), or a refusal before any work."""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.run import main
from pipeline.sources import corpus
from tests.conftest import REPO, report, rows_of, visible_files
from tests.test_corpus import CAPTIONS, jpeg, write_tar

KEYS = [f"k{i:03d}" for i in range(12)]


def rows(n: int = 12) -> list[dict]:
    return [{"key": KEYS[i], "caption": CAPTIONS[i % len(CAPTIONS)], "url": f"http://img.example/{i}.jpg"}
            for i in range(n)]


def run(out, *flags, stage="train_negatives") -> int:
    """A quick stage over the corpus: shuffle negatives need no statistics pass."""
    return main([f"--stage={stage}", f"--output_dir={out}", "--progress_seconds=0", "--allow_empty",
                 "--negative_types=shuffle_bigrams", *flags])


def section(out, table="train_negatives") -> dict:
    return report(out)["tables"][table]


def fates(out, table="train_negatives") -> dict[str, list[str]]:
    """Each key's fate: the tables' rows, discarded and rejected dead letters (by reason)."""
    found: dict[str, list[str]] = {}
    for r in rows_of(out, table):
        found.setdefault(r["key"], []).append("row")
    for kind in ("discarded", "rejected"):
        for letter in rows_of(out, kind):
            record = json.loads(letter["record"])
            key = record.get("key") if isinstance(record, dict) else None
            found.setdefault(str(key), []).append(letter["reason"])
    return {k: sorted(set(v)) for k, v in found.items()}


def one_error(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def write_csv(path, header: str, lines: list[str], newline: str = "\n") -> None:
    path.write_bytes((newline.join([header, *lines]) + newline).encode("utf-8", "surrogateescape"))


# ------------------------------------------------------------------------------------------------ CSV and TSV

def test_n3_a_quote_opening_a_tsv_caption_is_one_rejected_record(tmp_path, capsys):
    """46709a5 read TSV through Python's csv (excel-tab): a caption beginning with " ran on to the next quote,
    merging the records between into one caption. Now a TSV has no quoting: a field beginning with a quote is
    ambiguous and its record alone is rejected; every other line is its own record."""
    lines = [f"{r['key']}\t{r['caption']}\t{r['url']}" for r in rows()]
    lines[2] = f'{KEYS[2]}\t"A dog\t{rows()[2]["url"]}'
    lines[7] = f'{KEYS[7]}\tA cat on a "soft" bed.\t{rows()[7]["url"]}'  # a quote inside a field is text
    write_csv(tmp_path / "c.tsv", "key\tcaption\turl", lines)
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/c.tsv") == 0
    assert section(out)["read"] == 12 and section(out)["balanced"]
    assert section(out)["reject_reasons"] == {"ambiguous_quote": 1}
    assert set(fates(out)) == set(KEYS) - {KEYS[2]} | {"None"}
    captions = {r["key"]: r["caption"] for r in rows_of(out, "train_negatives")}
    assert captions[KEYS[7]] == 'A cat on a "soft" bed.'
    assert all(KEYS[i] not in c for c in captions.values() for i in range(12))


@pytest.mark.parametrize("line, reason", [
    ('{key},"A dog on a couch.,http://img.example/x.jpg', "bad_quotes"),      # a quote that never closes
    ('{key},"A dog" on a couch.,http://img.example/x.jpg', "bad_quotes"),     # text after a closing quote
    ("{key},A dog, a cat and a bird.,http://img.example/x.jpg", "wrong_field_count"),  # N39: unquoted commas
    ("{key},,http://img.example/x.jpg,extra", "wrong_field_count"),           # N38: more fields than the header
])
def test_n39_n38_a_csv_line_that_breaks_the_rules_is_its_own_rejected_record(tmp_path, line, reason):
    """N39: 46709a5 cut a caption at its unquoted commas and stored the tail as the row's file_name (7 of 28 rows
    garbage, exit 0); N38: a row with more fields than the header, once rejected, crashed the run
    (json.dumps(sort_keys=True) on csv's None key). Now the line is rejected with its reason, and no other
    record is touched."""
    lines = [f"{r['key']},{r['caption']},{r['url']}" for r in rows()]
    lines[4] = line.format(key=KEYS[4])
    write_csv(tmp_path / "c.csv", "key,caption,url", lines)
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/c.csv") == 0
    assert section(out)["read"] == 12 and section(out)["balanced"]
    assert section(out)["reject_reasons"] == {reason: 1}
    assert KEYS[4] not in fates(out) and set(fates(out)) == set(KEYS) - {KEYS[4]} | {"None"}
    assert all(r["file_name"] is None and r["image_url"].startswith("http") for r in rows_of(out, "train_negatives"))


def test_n2_a_csv_field_longer_than_pythons_limit_costs_only_its_record(tmp_path):
    """One field of 200,000 characters (Python's csv stops at 131,072): 46709a5 dropped every later record of the
    file (read 51 of 100, "balanced"). Now that record is caption_too_long and all 100 are read."""
    records = [{"key": f"k{i:03d}", "caption": CAPTIONS[i % 10], "url": f"http://img.example/{i}.jpg"}
               for i in range(100)]
    records[50]["caption"] = "a dog " * 40_000
    write_csv(tmp_path / "c.csv", "key,caption,url", [f"{r['key']},{r['caption']},{r['url']}" for r in records])
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/c.csv") == 0
    assert section(out)["read"] == 100 and section(out)["balanced"]
    assert section(out)["reject_reasons"] == {"caption_too_long": 1}
    assert len(fates(out)) == 100


# ---------------------------------------------------------------------------------------- sizes bounded first

def test_n5_a_line_past_max_record_bytes_is_rejected_unread_and_its_dead_letter_is_bounded(tmp_path):
    """A 3 MB JSONL line (the probe's was 500 MB and peaked at 6.65 GiB, written whole into the dead letters):
    rejected as record_too_large, read past in chunks, and the dead letters never hold more than about 64 KB of a
    record (a caption_too_long one of 300 KB, under the bound, included)."""
    lines = [json.dumps(r) for r in rows()]
    lines[3] = json.dumps({"key": KEYS[3], "caption": "a dog " * 500_000})
    lines[5] = json.dumps({"key": KEYS[5], "caption": "a cat " * 50_000})
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/c.jsonl") == 0
    assert section(out)["read"] == 12 and section(out)["balanced"]
    assert section(out)["reject_reasons"] == {"caption_too_long": 1, "record_too_large": 1}
    letters = {letter["reason"]: letter for letter in rows_of(out, "rejected")}
    assert "3,000,0" in letters["record_too_large"]["detail"] and "--max_record_bytes=1,048,576" in \
        letters["record_too_large"]["detail"]
    assert all(len(letter["record"]) < 70_000 for letter in letters.values())


def test_n5_a_parquet_row_past_max_record_bytes_is_rejected_before_it_becomes_python_strings(tmp_path):
    """The same bound for a Parquet row's text cells; a cell of a type no column read may have (a list) is never
    made into Python objects (its record is rejected as the wrong type: round 5's M32 made that bad_image, where
    the list was dropped and the row kept), and a dictionary-encoded text column (a pandas categorical) is still
    text."""
    records = rows(6)
    records[3]["caption"] = "a dog " * 1_000
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "a.parquet")
    pq.write_table(pa.table({"key": ["d1", "d2"], "caption": pa.array(CAPTIONS[:2]).dictionary_encode(),
                             "url": ["http://a", "http://b"]}), tmp_path / "b.parquet")
    pq.write_table(pa.table({"key": ["d3"], "caption": CAPTIONS[2:3], "url": pa.array([["http://c"]])}),
                   tmp_path / "c.parquet")
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/*.parquet", "--max_record_bytes=1024") == 0
    assert section(out)["read"] == 9 and section(out)["balanced"]
    assert section(out)["reject_reasons"] == {"record_too_large": 1, "bad_image": 1}
    assert {"d1", "d2"} <= set(fates(out)) and fates(out)["d1"] == ["row"] and fates(out)["d3"] == ["bad_image"]
    assert "not read" in next(r["detail"] for r in rows_of(out, "rejected") if r["reason"] == "bad_image")


def test_n5_lines_are_read_in_bounded_pieces(tmp_path):
    """However long a line, no read asks for more than the bound or 1 MiB."""
    from pipeline.sources.files import LongLine, bounded_lines

    path = tmp_path / "long.jsonl"
    path.write_bytes(b'{"a": 1}\n' + b"x" * (5 << 20) + b"\n" + b'{"b": 2}\n')
    asked = []

    class Counting(io.FileIO):
        def readline(self, size=-1):
            asked.append(size)
            return super().readline(size)

    with Counting(str(path)) as f:
        lines = list(bounded_lines(f, 0, path.stat().st_size, 1024))
    assert [(o, x.size if isinstance(x, LongLine) else x) for o, x in lines] == \
        [(0, b'{"a": 1}'), (9, (5 << 20) + 1), (9 + (5 << 20) + 1, b'{"b": 2}')]
    assert 0 < max(asked) <= 1 << 20


def test_n9_a_sparse_or_large_tar_member_is_rejected_unread(tmp_path):
    """A 10 KB tar holding a sparse 256 MB .txt member drove 46709a5 past 8 GiB (the member read whole). A sample
    with a sparse member is rejected (not_a_regular_file), one whose .txt is past --max_record_bytes
    record_too_large, neither read."""
    if shutil.which("tar") is None:
        pytest.fail("GNU tar is needed to write a sparse member")
    src = tmp_path / "src"
    src.mkdir()
    for i, r in enumerate(rows(3)):
        (src / f"{r['key']}.jpg").write_bytes(jpeg())
        (src / f"{r['key']}.txt").write_text("a caption " * (200 if i == 1 else 1))
    with open(src / f"{KEYS[2]}.txt", "wb") as f:
        f.truncate(256 << 20)  # sparse: no block written
    subprocess.run(["tar", "--sparse", "--sort=name", "-cf", str(tmp_path / "00000.tar"), "-C", str(src), "."],
                   check=True)
    assert (tmp_path / "00000.tar").stat().st_size < 100_000
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/00000.tar", "--max_record_bytes=1024") == 0
    assert section(out)["read"] == 3 and section(out)["balanced"]
    assert section(out)["reject_reasons"] == {"not_a_regular_file": 1, "record_too_large": 1}


def test_n7_a_webdataset_sample_of_a_link_is_counted(tmp_path):
    """46709a5 skipped a sample whose only member is a symbolic link: 36 of 37 samples counted."""
    path = tmp_path / "00000.tar"
    write_tar(path, rows(5))
    with tarfile.open(path, "a") as tar:
        link = tarfile.TarInfo("zzz.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    out = tmp_path / "out"
    assert run(out, f"--captions={path}") == 0
    assert section(out)["read"] == 6 and section(out)["balanced"]
    assert section(out)["reject_reasons"] == {"not_a_regular_file": 1}


# -------------------------------------------------------------------------------------------- text and fields

@pytest.mark.parametrize("fmt", ["csv_key", "csv_url", "jsonl_key", "tar_name", "reference"])
def test_n1_bytes_that_are_not_utf8_cost_only_their_record(tmp_path, fmt):
    """A latin-1 byte in a CSV key or url, a \\ud800 JSONL key, a latin-1 tar member name: 46709a5's run died in
    a 133-line UnicodeEncodeError (Beam's coder), also through --reference_captions. Now the record is rejected
    as invalid_utf8."""
    good = rows(6)
    flags = []
    if fmt.startswith("csv"):
        lines = [f"{r['key']},{r['caption']},{r['url']}" for r in good]
        lines[2] = f"k\udce9x,A red car.,{good[2]['url']}" if fmt == "csv_key" else \
            f"{KEYS[2]},A red car.,http://img.example/\udce9.jpg"
        write_csv(tmp_path / "c.csv", "key,caption,url", lines)
        flags.append(f"--captions={tmp_path}/c.csv")
    elif fmt in ("jsonl_key", "reference"):
        lines = [json.dumps(r) for r in good]
        lines[2] = json.dumps({**good[2], "key": "k\ud800"})
        (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
        if fmt == "reference":
            (tmp_path / "in.jsonl").write_text(json.dumps(good[0]) + "\n")
            flags += [f"--captions={tmp_path}/in.jsonl", f"--reference_captions={tmp_path}/c.jsonl"]
        else:
            flags.append(f"--captions={tmp_path}/c.jsonl")
    else:
        with tarfile.open(tmp_path / "00000.tar", "w", encoding="latin-1", format=tarfile.GNU_FORMAT) as tar:
            for i, r in enumerate(good):
                key = "k\xe9x" if i == 2 else r["key"]
                for ext, data in (("jpg", jpeg()), ("txt", r["caption"].encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        flags.append(f"--captions={tmp_path}/00000.tar")
    out = tmp_path / "out"
    assert run(out, *flags) == 0
    if fmt == "reference":
        assert section(out)["read"] == 1 and section(out)["balanced"]
        return
    assert section(out)["read"] == 6 and section(out)["balanced"]
    assert section(out)["reject_reasons"] == {"invalid_utf8": 1}


def test_n1_a_flag_value_with_bytes_that_are_not_utf8_is_one_line(tmp_path, capsys):
    """A latin-1 byte in the --captions path itself: Beam encodes the options as UTF-8 for its workers, a traceback
    on 46709a5. Now one line before any work; a pattern matching that file reads it (its name escaped)."""
    folder = os.fsencode(tmp_path) + b"/lat"
    os.mkdir(folder)
    with open(folder + b"/c\xe9.jsonl", "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows(3)))
    out = tmp_path / "out"
    assert run(out, "--captions=" + os.fsdecode(folder + b"/c\xe9.jsonl")) == 2
    assert one_error(capsys) == f"error: --captions: --captions={tmp_path}/lat/c\\xe9.jsonl holds bytes that are " \
        "not UTF-8; rename the file or folder (a --captions pattern may match it instead)"
    assert run(out, f"--captions={tmp_path}/lat/*.jsonl") == 0
    assert list(section(out)["files"]) == ["c\\xe9.jsonl"] and section(out)["read"] == 3


def test_n47_a_bom_before_the_first_jsonl_record_is_not_part_of_it(tmp_path):
    """46709a5 rejected a JSONL file's first record when a UTF-8 BOM preceded it (its CSV reader dropped one)."""
    (tmp_path / "c.jsonl").write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in rows(4)).encode())
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/c.jsonl") == 0
    assert section(out)["read"] == 4 and section(out)["rejected"] == 0 and KEYS[0] in fates(out)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_n4_a_status_column_of_a_plain_corpus_is_not_a_download_status(tmp_path, fmt):
    """46709a5 took any `status` column as img2dataset's and discarded rows whose status was not "success" as
    image_not_downloaded. Only img2dataset's own files (a status and an error_message column) say that."""
    records = [{**r, "status": "draft" if i % 2 else "published"} for i, r in enumerate(rows(6))]
    path = tmp_path / f"c.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif fmt == "csv":
        write_csv(path, "key,caption,url,status", [",".join(r.values()) for r in records])
    else:
        pq.write_table(pa.Table.from_pylist(records), path)
    out = tmp_path / "out"
    assert run(out, f"--captions={path}") == 0
    assert section(out)["read"] == 6 and "image_not_downloaded" not in section(out)["discard_reasons"]
    assert section(out)["rows"] > 0


def test_n4_an_img2dataset_status_of_its_own_is_discarded_with_its_error_and_an_unknown_one_rejected(tmp_path):
    records = [{**r, "status": "success", "error_message": None} for r in rows(4)]
    records[1].update(status="failed_to_download", error_message="HTTP Error 404")
    records[2].update(status="pending")
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "00000.parquet")
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/00000.parquet") == 0
    assert section(out)["discard_reasons"].get("image_not_downloaded") == 1
    assert section(out)["reject_reasons"] == {"unknown_status": 1}


def test_n12_a_column_named_twice_is_refused_before_any_work(tmp_path, capsys):
    """Two Parquet columns named caption: 46709a5 used the second silently. A CSV header naming one twice, and a
    JSONL record naming a field twice (json keeps the last), are refused too: the file before any work, the
    record as repeated_field."""
    table = pa.Table.from_arrays([pa.array(KEYS[:3]), pa.array(["A dog."] * 3), pa.array(["A cat."] * 3)],
                                 names=["key", "caption", "caption"])
    pq.write_table(table, tmp_path / "two.parquet")
    write_csv(tmp_path / "two.csv", "key,caption,caption", ["k1,A dog.,A cat."])
    for name in ("two.parquet", "two.csv"):
        assert run(tmp_path / "out", f"--captions={tmp_path}/{name}") == 2
        assert f"{name}: two columns named 'caption'" in one_error(capsys)
    assert not (tmp_path / "out" / "report.json").exists()
    (tmp_path / "c.jsonl").write_text(json.dumps(rows(1)[0]) + "\n" +
                                      '{"key": "k9", "caption": "A dog.", "caption": "A cat."}\n')
    out = tmp_path / "jsonl"
    assert run(out, f"--captions={tmp_path}/c.jsonl") == 0
    assert section(out)["reject_reasons"] == {"repeated_field": 1} and section(out)["balanced"]


# --------------------------------------------------------------------------- what the launcher planned is read

def test_n14_a_fifo_or_a_device_given_as_captions_is_refused_before_any_read(tmp_path):
    """46709a5's launcher hung on a FIFO or /dev/zero (opened, or hashed forever) with no output; so did a stage
    on a FIFO given as another input file (--aro_vga)."""
    fifo = tmp_path / "captions.jsonl"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), ("/dev/zero", "a device")):
        done = subprocess.run([sys.executable, "-m", "pipeline.run", "--stage=train_negatives",
                               f"--output_dir={tmp_path / 'out'}", f"--captions={path}", "--captions_format=jsonl"],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert f"{path}: {kind}, not a regular file" in lines[0]
    done = subprocess.run([sys.executable, "-m", "pipeline.run", "--stage=eval_sets", f"--output_dir={tmp_path / 'e'}",
                           f"--aro_vga={fifo}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip() == f"error: {fifo}: a FIFO, not a regular file: only files " \
        "are read", done.stderr


def changed_once_planned(monkeypatch, change):
    """Calls change() once the launcher has planned the read units (the fingerprint is taken by then)."""
    real = corpus.units

    def planned(files):
        out = real(files)
        change()
        monkeypatch.setattr(corpus, "units", real)
        return out

    monkeypatch.setattr(corpus, "units", planned)


def test_n16_a_csv_appended_to_during_the_stage_fails_it_with_one_line(tmp_path, monkeypatch, capsys):
    """46709a5 read rows of the 200-record file while made_from recorded the 150-record one, and committed them.
    Now the workers check the file is the version the launcher planned and fingerprinted: one line, exit 2,
    nothing committed."""
    records = rows(12)
    write_csv(tmp_path / "c.csv", "key,caption,url", [",".join(r.values()) for r in records[:8]])

    def append():
        with open(tmp_path / "c.csv", "a") as f:
            f.write("".join(",".join(r.values()) + "\n" for r in records[8:]))

    changed_once_planned(monkeypatch, append)
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/c.csv") == 2
    line = one_error(capsys)
    assert line.startswith(f"error: {tmp_path}/c.csv: changed while the run read it") and "nothing was written" in line
    assert visible_files(out) == {}


def test_n40_a_parquet_file_replaced_during_the_stage_fails_it_with_one_line(tmp_path, monkeypatch, capsys):
    """Write + rename of a Parquet file of 20 row groups by one of 2: 46709a5 read 20 of 200 records, exit 0,
    "balanced", made_from naming the 200-record file."""
    big = [{**r, "key": f"k{i:04d}"} for i, r in enumerate(rows(10) * 20)]
    pq.write_table(pa.Table.from_pylist(big), tmp_path / "c.parquet", row_group_size=10)
    pq.write_table(pa.Table.from_pylist(big[:20]), tmp_path / "new.parquet", row_group_size=1)  # 20 groups, as planned
    changed_once_planned(monkeypatch, lambda: os.replace(tmp_path / "new.parquet", tmp_path / "c.parquet"))
    out = tmp_path / "out"
    assert run(out, f"--captions={tmp_path}/c.parquet") == 2
    assert f"{tmp_path}/c.parquet: changed while the run read it" in one_error(capsys)
    assert visible_files(out) == {}


def test_n37_reference_captions_have_a_format_of_their_own(tmp_path, capsys):
    """--captions_format=jsonl also applied to a COCO --reference_captions on 46709a5: one bad record, nothing
    contributed, silently (made_from listed it). Now the reference's format is told by its own flag (auto by
    default), and a reference file that gives no caption fails the run with one line."""
    (tmp_path / "input.data").write_text(json.dumps({"key": "only", "caption": "A dog sitting on a couch."}) + "\n")
    cats = ["A cat sitting on a bed.", "A cat on a chair."] * 3
    coco = {"images": [{"id": 1, "file_name": "1.jpg"}],
            "annotations": [{"id": i, "image_id": 1, "caption": c} for i, c in enumerate(cats)]}
    (tmp_path / "ref.json").write_text(json.dumps(coco))
    flags = [f"--captions={tmp_path}/input.data", "--captions_format=jsonl", "--negative_types=replace",
             f"--reference_captions={tmp_path}/ref.json"]
    out = tmp_path / "out"
    assert main(["--stage=train_negatives", f"--output_dir={out}", "--progress_seconds=0", *flags]) == 0
    assert any("cat" in r["hard_negative"] for r in rows_of(out, "train_negatives"))
    capsys.readouterr()
    wrong = tmp_path / "wrong"
    assert main(["--stage=train_negatives", f"--output_dir={wrong}", "--progress_seconds=0", *flags,
                 "--reference_captions_format=jsonl"]) == 2
    assert "--reference_captions: ref.json gave no caption (1 records read: bad_key 1)" in one_error(capsys)
    assert visible_files(wrong) == {}


def test_n49_a_parquet_file_of_one_row_groups_is_read_in_few_units(tmp_path, monkeypatch):
    """5,000 one-row groups took 104 s on 46709a5 (20,000 about 940 s): a unit per row group, each opening the
    file and reading its footer, which lists them all. Now the groups are read together, the footer once."""
    pq.write_table(pa.Table.from_pylist([{"key": f"k{i}", "caption": "A dog."} for i in range(5_000)]),
                   tmp_path / "c.parquet", row_group_size=1)
    [f] = corpus.input_files(type("Opts", (), {"captions": [f"{tmp_path}/c.parquet"], "coco_captions": None,
                                                "captions_format": "auto", "caption_column": "caption",
                                                "id_column": "key", "image_column": "url"})())
    opened = []
    real = pq.ParquetFile
    monkeypatch.setattr(pq, "ParquetFile", lambda source, *a, **k: opened.append(source) or real(source, *a, **k))
    units = corpus.units([f])
    assert len(units) == 1
    positions = [i for u in units for i, _ in corpus._raw_records(u, corpus.Columns())]
    assert positions == list(range(5_000)) and len(opened) == 1


# ------------------------------------------------------------------------------------------ reports of odd shape

@pytest.mark.parametrize("report_text", ["[]", '{"tables": []}', '{"tables": {"train_negatives": []}}',
                                         '{"tables": {"train_negatives": {"shards": {}, "sha256": 5}}}'])
def test_n27_a_folder_whose_report_is_not_a_report_is_refused_by_every_reader_and_writer(tmp_path, capsys,
                                                                                         report_text):
    """N27's report.json of `[]` or odd sections, met by the other readers: 46709a5's stage ended its commit in a
    traceback (its tables renamed in, the report not merged), and publish and load_table in AttributeErrors. Each
    now says in one line that it is not a report, before any work; the file is left as it was."""
    from pipeline.tables.folders import PublishError
    from pipeline.tables.load import load_table

    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(3)))
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text(report_text)
    assert run(out, f"--captions={tmp_path}/c.jsonl") == 2
    assert one_error(capsys).startswith(f"error: --output_dir: {out}/report.json is not a hardpos report (")
    assert (out / "report.json").read_text() == report_text and visible_files(out) == {"report.json":
                                                                                          report_text.encode()}
    assert main(["--stage=publish", f"--output_dir={out}"]) == 2
    assert "report.json: not a hardpos report (" in one_error(capsys)
    with pytest.raises(PublishError, match="not a hardpos report"):
        load_table(str(out), "train_negatives")


# ------------------------------------------------------------------------------------------------ spill folders

@pytest.mark.parametrize("spill", ["file", "long"])
def test_n17_a_spill_dir_that_cannot_be_a_folder_is_one_line(tmp_path, capsys, spill):
    """--spill_dir through a regular file (ENOTDIR) or with a 300-character name: a 25-line traceback on
    46709a5; now one line before any work."""
    (tmp_path / "c.jsonl").write_text(json.dumps(rows(1)[0]) + "\n")
    (tmp_path / "a_file").write_text("")
    folder = tmp_path / "a_file" / "spill" if spill == "file" else tmp_path / ("s" * 300)
    assert run(tmp_path / "out", f"--captions={tmp_path}/c.jsonl", f"--spill_dir={folder}") == 2
    line = one_error(capsys)
    assert line.startswith(f"error: --spill_dir={folder}: ") and \
        ("a_file is not a folder" if spill == "file" else "longer than 255 bytes") in line


def test_n18_a_killed_runs_spill_folder_is_removed_by_the_next_run(tmp_path):
    """A SIGKILLed run's spill folder stayed forever on 46709a5 (GBs at CC3M's size). Each run holds a lock in
    its folder; a later run removes the folders whose lock is free."""
    pq.write_table(pa.Table.from_pylist([{**r, "key": f"k{i:04d}"} for i, r in enumerate(rows(10) * 30)]),
                   tmp_path / "c.parquet")
    spill_root = tmp_path / "spill"
    argv = [sys.executable, "-m", "pipeline.run", "--stage=train_negatives", f"--output_dir={tmp_path / 'out'}",
            f"--captions={tmp_path}/c.parquet", f"--spill_dir={spill_root}", "--progress_seconds=0"]
    killed = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (spill_root.is_dir() and [p for p in spill_root.iterdir() if p.name.startswith("hardpos-spill-")]):
            assert killed.poll() is None and time.monotonic() < deadline, "the run ended before spilling"
            time.sleep(0.02)
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
    left = [p.name for p in spill_root.iterdir()]
    assert left
    assert main(argv[3:]) == 0
    assert [p.name for p in spill_root.iterdir()] == []
