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


# ---------------------------------------------------------------------------------------- fields and lines

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
