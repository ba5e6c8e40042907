"""Caption corpora as researchers have them: img2dataset's shards (its parquet metadata, or webdataset tars),
Parquet, JSONL or CSV files, and COCO captions files; any number of files (`--captions=PATTERN`, Beam file
patterns, repeatable or comma-separated).

Reading is spread over the workers: a unit is a file, or a range of one (Parquet row groups, 64 MiB of JSONL); the
launcher lists the files and reads Parquet footers and the first bytes of the others, never the records. What it
planned is what the workers read: each file is listed once per run with its version (files.local_version), which
the fingerprint in report.json's made_from hashes and every worker checks where it reads; a file changed meanwhile
fails the run with one line naming it. A record keeps the corpus's own key (string) and image reference, so that a
training row finds its image again; example_id is a hash of ("captions", key) (COCO files keep ("coco", caption
id), as they always had). Every record is accounted for per input file: read = rows + discarded (img2dataset's
failed downloads, with their error) + rejected (malformed records, a key seen before). Every record is bounded
before it is read (--max_record_bytes: a line, a tar member); every string it gives is valid UTF-8.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import posixpath
import tarfile
from collections import Counter
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.io import spill
from pipeline.io.dead_letters import DISCARDED, REJECTED, dead_letter
from pipeline.options import UsageError
from pipeline.perturb.outcomes import Discard, Reject
from pipeline.perturb.text import has_surrogates, printable
from pipeline.publish.image_shards import TEXT_SUFFIXES, suffix_of, tar_samples
from pipeline.records import example_id
from pipeline.sources import coco, delimited
from pipeline.sources.files import (
    DEFAULT_BOUNDS,
    PROBLEMS,
    READ,
    InputBounds,
    InputChanged,
    LongLine,
    bounded_lines,
    fields_of,
    local_version,
    opened_as_planned,
    problem_count,
    regular_file_problem,
    reject_letter,
    repeated_name,
)
from pipeline.urls import cut, has_scheme, redact_urls

SOURCE = "captions"
FORMATS = ("auto", "coco", "img2dataset", "webdataset", "parquet", "jsonl", "csv")
RANGE_BYTES = 64 << 20  # a JSONL file is read in ranges of this many bytes, each by any worker
# Parquet row groups are read together until a unit holds this many rows or RANGE_BYTES (uncompressed): a worker
# opens the file (its footer, which lists every row group) once per unit, so a unit per row group of a file of
# one-row groups was quadratic (5,000 groups: 104 s; 20,000: about 940 s).
UNIT_ROWS = 50_000
SNIFF_BYTES = 1 << 16
# A COCO captions file is one JSON object a worker must parse whole; up to this size the launcher parses it too,
# to say what is wrong with it in one line and to count its captions for the progress totals (COCO's own files
# are 25 and 91 MB). A larger one is only sniffed: its problems become a dead letter of the run.
COCO_CHECKED_BYTES = 256 << 20
MAX_COCO_BYTES = 2 << 30  # a worker holds the parsed object, several times the file
DUPLICATE_KEY = "duplicate_key"
# img2dataset's statuses: a failed download is discarded with its error; any other status is not guessed at.
DOWNLOAD_FAILED = ("failed_to_download", "failed_to_resize")


@dataclass(frozen=True)
class Columns:
    """Where a record's caption, key and image reference are (img2dataset's names by default)."""

    caption: str = "caption"
    key: str = "key"
    image: str = "url"

    @classmethod
    def of(cls, opts) -> Columns:
        return cls(opts.caption_column, opts.id_column, opts.image_column)

    def read(self) -> tuple[str, ...]:
        """The columns a record is read for, img2dataset's status and error among them."""
        return tuple(dict.fromkeys((self.key, self.caption, self.image, "status", "error_message")))


@dataclass(frozen=True)
class InputFile:
    path: str
    name: str        # source_file: the report's per-file accounting and the dead letters name it
    format: str
    size: int
    mtime: float = 0.0  # as the listing gave it: the fingerprint of a corpus too big to hash
    version: tuple = ()  # as the launcher listed it: what every reader checks (files.opened_as_planned)


@dataclass(frozen=True)
class Unit:
    """What one worker reads: a whole file (start = end = 0), Parquet row groups [start, end) whose first row is
    the file's row first_row, or the JSONL lines that begin in bytes [start, end)."""

    file: InputFile
    start: int = 0
    end: int = 0
    first_row: int = 0


def split_patterns(values) -> list[str]:
    """A repeatable flag's values, each comma-separated, as one list of patterns (spaces around commas dropped)."""
    return [p.strip() for value in (values or []) for p in value.split(",") if p.strip()]


def patterns_of(opts) -> list[str]:
    """--captions as given (repeatable, each comma-separated), else --coco_captions."""
    return split_patterns(opts.captions) or ([opts.coco_captions] if opts.coco_captions else [])


def requested(opts) -> bool:
    return bool(patterns_of(opts))


def format_of(opts) -> str:
    return opts.captions_format if opts.captions else "coco"


# The files of each set of patterns as a run listed them first: inside one_plan() (a run, all the stages of a
# chain) they are listed once, so that the fingerprint report.json records, the read units and every worker's
# check are of the same versions.
_PLANS: dict | None = None


@contextlib.contextmanager
def one_plan():
    """Every listing of the same patterns inside is the first one."""
    global _PLANS
    before, _PLANS = _PLANS, {}
    try:
        yield
    finally:
        _PLANS = before


def input_files(opts) -> list[InputFile]:
    """The files the patterns match, each with its format and version; UsageError (one line) for a pattern that
    matches nothing, a path that is not a regular file (a FIFO or /dev/zero would hang the launcher), a format
    that cannot be told, or columns a Parquet or CSV file does not have (or has twice)."""
    plan = (tuple(patterns_of(opts)), bool(opts.captions), format_of(opts), Columns.of(opts))
    if _PLANS is not None and plan in _PLANS:
        return _PLANS[plan]
    files = _list_files(opts)
    if _PLANS is not None:
        _PLANS[plan] = files
    return files


def _list_files(opts) -> list[InputFile]:
    flag = getattr(opts, "flag", "--captions")
    found: dict[str, tuple[int, float]] = {}
    for pattern in patterns_of(opts):
        try:
            # --coco_captions names one file: taken as written, never as a pattern (coco[1].json is not coco1.json)
            matched = _literal(pattern) if not opts.captions else FileSystems.match([pattern])[0].metadata_list
        except Exception as e:  # FileSystems wraps local and remote errors alike
            raise UsageError(redact_urls(f"{flag}: cannot list {pattern} ({str(e).splitlines()[0] if str(e) else e})"))\
                from None
        files = [m for m in matched if not m.path.endswith("/")]
        if not files:
            raise UsageError(redact_urls(f"{flag}: no file matches {pattern}" if opts.captions else
                                         f"{pattern}: no such file"))
        for m in files:
            found.setdefault(m.path, (m.size_in_bytes, getattr(m, "last_updated_in_seconds", 0.0) or 0.0))
    spellings: dict[tuple, list[str]] = {}  # a file by its identity: the paths that name it
    for p in sorted(found):
        problem = regular_file_problem(p)
        if problem:
            raise UsageError(f"{flag}: {p}: {problem}")
        spellings.setdefault(("url", p) if has_scheme(p) else _local_identity(p), []).append(p)
    # a file named twice (x.jsonl and ./x.jsonl, a link to it) is listed once: read twice, its records were
    # counted twice and rejected as duplicates of themselves
    paths = sorted(min(named, key=lambda p: (len(p), p)) for named in spellings.values())
    names = _display_names(paths)
    out = []
    for p in paths:
        size, mtime = found[p]
        version = (size, mtime) if has_scheme(p) else _local_version(p)
        if not has_scheme(p):
            size = version[1]
        out.append(InputFile(p, names[p], resolve_format(p, format_of(opts), version, flag), size, mtime, version))
    for f in out:
        check_file(f, Columns.of(opts))
    return out


def _literal(path: str) -> list:
    """The file at path as FileSystems.match lists one (none when there is nothing there), its name not a pattern."""
    from apache_beam.io.filesystem import FileMetadata

    if has_scheme(path):
        matched = FileSystems.match([path])[0].metadata_list
        return [m for m in matched if m.path == path]
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return []
    return [FileMetadata(path, st.st_size, st.st_mtime)]


def _local_identity(path: str) -> tuple:
    """What tells a local file from another whatever its path is spelt: its device and inode."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise UsageError(f"{path}: cannot read ({e.strerror or e})") from None
    return "local", st.st_dev, st.st_ino


def _local_version(path: str) -> tuple:
    try:
        return local_version(path)
    except OSError as e:
        raise UsageError(f"{path}: cannot read ({e.strerror or e})") from None


# A run lists its corpus several times (the checks, the fingerprint, the progress totals, the read units; again
# per stage of --stage=all): what was learnt of a file's contents is kept by the file's version, so that the
# launcher reads each Parquet footer once (21 times per file in a --stage=all run before; each one a request on
# object storage) and hashes or parses a file once.
_KNOWN: dict[tuple, object] = {}


def _known(kind: str, path: str, version: tuple, compute):
    """compute(), once per (kind, file, version); every time for a remote file whose listing gives no time."""
    if not version or (has_scheme(path) and not version[-1]):
        return compute()
    key = (kind, path, *version)
    if key not in _KNOWN:
        _KNOWN[key] = compute()
    return _KNOWN[key]


_LAST: dict[str, tuple] = {}


def _known_last(kind: str, path: str, version: tuple, compute):
    """As _known, keeping only the last file's value of a kind (a COCO file's captions: not a list per file)."""
    if not version:
        return compute()
    held = _LAST.get(kind)
    if held is None or held[0] != (path, *version):
        held = _LAST[kind] = ((path, *version), compute())
    return held[1]


def _display_names(paths: list[str]) -> dict[str, str]:
    """Each file's basename, or its path below the files' common folder where two share a basename; bytes of a
    name that are not UTF-8 written as \\xNN escapes, since the name is every record's source_file."""
    bases = [posixpath.basename(p.replace("\\", "/")) for p in paths]
    if len(set(bases)) == len(bases):
        names = dict(zip(paths, bases, strict=True))
    else:
        common = posixpath.commonpath([posixpath.dirname(p.replace("\\", "/")) for p in paths])
        names = {p: posixpath.relpath(p.replace("\\", "/"), common) for p in paths}
    return {p: _valid_text(name) for p, name in names.items()}


def _valid_text(name: str) -> str:
    if not has_surrogates(name):
        return name
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def resolve_format(path: str, requested_format: str, version: tuple = (), flag: str = "--captions") -> str:
    """The format asked for, or with auto the one the file's name says (a Parquet file with img2dataset's
    `status` and `error_message` columns is img2dataset's: a `status` of its own is a plain column)."""
    if requested_format != "auto":
        return requested_format
    name = path.lower()
    for suffix, fmt in ((".json", "coco"), (".jsonl", "jsonl"), (".ndjson", "jsonl"), (".csv", "csv"),
                        (".tsv", "csv"), (".tar", "webdataset")):
        if name.endswith(suffix):
            return fmt
    if name.endswith(".parquet"):
        names = _parquet_facts(path, version).names
        return "img2dataset" if {"status", "error_message"} <= set(names) else "parquet"
    raise UsageError(f"{flag}_format=auto: cannot tell the format of {path} from its name; name it "
                     f"({flag}_format={'|'.join(FORMATS[1:])})")


@dataclass(frozen=True)
class ParquetFacts:
    names: tuple[str, ...]
    num_rows: int
    num_row_groups: int
    group_rows: tuple[int, ...] = ()
    group_bytes: tuple[int, ...] = ()  # uncompressed


def _parquet_facts(path: str, version: tuple = ()) -> ParquetFacts:
    """A Parquet file's column names and row and row-group counts, from its footer (read once per version)."""
    import pyarrow.parquet as pq

    def read() -> ParquetFacts:
        try:
            with FileSystems.open(path) as f:
                meta = pq.ParquetFile(f).metadata
                groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
                return ParquetFacts(tuple(meta.schema.to_arrow_schema().names), meta.num_rows, meta.num_row_groups,
                                    tuple(g.num_rows for g in groups), tuple(g.total_byte_size for g in groups))
        except Exception as e:
            raise UsageError(f"{path}: not a Parquet file ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
                from None

    return _known("parquet", path, version, read)


def _head(path: str) -> bytes:
    try:
        with FileSystems.open(path, compression_type="uncompressed") as f:
            return f.read(SNIFF_BYTES)
    except Exception as e:
        raise UsageError(f"{path}: cannot read ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
            from None


def check_file(f: InputFile, columns: Columns) -> None:
    """What the launcher checks of a file without reading its records: a Parquet file's columns, a CSV file's
    header, that a JSON file is an object and a tar file a tar. Once per version of the file: a check that passed
    is not made again."""
    _known(f"checked {f.format} {columns}", f.path, f.version, lambda: _check_file(f, columns))


def _missing_column(f: InputFile, columns: Columns, names, where: str) -> None:
    """UsageError for a caption or key column the file lacks, or one it names twice (a reader would take one of
    the two, silently)."""
    missing = [c for c in (columns.caption, columns.key) if c not in names]
    if missing:
        shown = ", ".join(printable(str(n))[:40] for n in list(names)[:12]) + (", ..." if len(names) > 12 else "")
        raise UsageError(f"{f.path}: no column {missing[0]!r} {where}(columns: {shown}); name it with "
                         f"--{'caption' if missing[0] == columns.caption else 'id'}_column")
    repeated = next((c for c in columns.read() if list(names).count(c) > 1), None)
    if repeated:
        raise UsageError(f"{f.path}: two columns named {repeated!r} {where}: which one holds the record's "
                         f"{repeated} cannot be told; rename one")


def csv_header(f: InputFile) -> list[str]:
    """The header of a CSV or TSV file (its first line, at most SNIFF_BYTES), or UsageError."""
    head = _head(f.path).removeprefix(b"\xef\xbb\xbf")
    line, newline, _ = head.partition(b"\n")
    if not newline and len(head) >= SNIFF_BYTES - 3:
        raise UsageError(f"{f.path}: its header line is longer than {SNIFF_BYTES:,} bytes")
    if b"\r" in line.removesuffix(b"\r"):  # the whole file would be one line
        raise UsageError(f"{f.path}: its lines end in CR alone (old Mac line breaks); write them as LF or CRLF")
    try:
        names = delimited.split_line(line.removesuffix(b"\r").decode("utf-8"), delimited.delimiter_of(f.path))
    except UnicodeDecodeError:
        raise UsageError(f"{f.path}: its header line is not UTF-8") from None
    except Reject as e:
        raise UsageError(f"{f.path}: its header line does not parse ({e.reason}: {e.detail})") from None
    return names


def _check_file(f: InputFile, columns: Columns) -> bool:
    if f.format in ("parquet", "img2dataset"):
        _missing_column(f, columns, _parquet_facts(f.path, f.version).names, "")
    elif f.format == "csv":
        _missing_column(f, columns, csv_header(f), "in its header ")
    elif f.format == "coco" and f.size > MAX_COCO_BYTES:
        raise UsageError(f"{f.path}: {f.size:,} bytes, more than a COCO captions file is read ({MAX_COCO_BYTES:,}: "
                         f"one JSON object, parsed whole by one worker); write its captions as JSONL")
    elif f.format == "coco" and f.size <= COCO_CHECKED_BYTES:
        coco.check_file(f.path)
    elif f.format == "coco" and not _head(f.path).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        raise UsageError(f"{f.path}: not a COCO captions file (not a JSON object)")
    elif f.format == "webdataset" and not tarfile.is_tarfile(io.BytesIO(_head(f.path) + b"\0" * 1024)):
        raise UsageError(f"{f.path}: not a tar file (--captions_format=webdataset)")
    return True


def units(files: list[InputFile]) -> list[Unit]:
    """The work: a Parquet file's row groups gathered into units of UNIT_ROWS rows (or RANGE_BYTES uncompressed), a
    JSONL file's byte ranges apart, other files whole."""
    out = []
    for f in files:
        if f.format in ("parquet", "img2dataset"):
            out += _parquet_units(f) or [Unit(f, 0, 0)]
        elif f.format == "jsonl" and f.size > RANGE_BYTES:
            out += [Unit(f, start, min(start + RANGE_BYTES, f.size)) for start in range(0, f.size, RANGE_BYTES)]
        else:
            out.append(Unit(f, 0, f.size if f.format == "jsonl" else 0))
    return out


def _parquet_units(f: InputFile) -> list[Unit]:
    facts = _parquet_facts(f.path, f.version)
    out, start, first, rows, size = [], 0, 0, 0, 0
    for group, (group_rows, group_bytes) in enumerate(zip(facts.group_rows, facts.group_bytes, strict=True)):
        rows, size = rows + group_rows, size + group_bytes
        if rows >= UNIT_ROWS or size >= RANGE_BYTES or group == facts.num_row_groups - 1:
            out.append(Unit(f, start, group + 1, first))
            start, first, rows, size = group + 1, first + rows, 0, 0
    return out


# Up to this many bytes of caption files the fingerprint is their contents' sha256; past it, each file's name, size
# and modification time (hashing 10 M captions would read the whole corpus in the launcher).
FINGERPRINT_BYTES = 1 << 30


def fingerprint(opts, files: list[InputFile] | None = None) -> str:
    """What identifies the corpus --captions reads (or `files`), for train_set's check that its tables were made
    from it: the sha256 of each file, of the version the run planned (UsageError if it is another by now)."""
    import hashlib

    files = input_files(opts) if files is None else files
    digest = hashlib.sha256()
    whole = sum(f.size for f in files) <= FINGERPRINT_BYTES
    for f in files:
        part = _known("sha256", f.path, f.version, lambda f=f: _sha256(f)) if whole else f"{f.size}:{f.mtime}"
        digest.update(f"{f.name}\x1f{f.format}\x1f{part}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _sha256(f: InputFile) -> str:
    from pipeline.tables.shards import stream_sha256

    try:
        with opened_as_planned(f.path, f.version) as handle:
            return stream_sha256(handle)
    except InputChanged as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"{f.path}: cannot read ({e.strerror or e})") from None


def expected_records(opts) -> int | None:
    """Records in the input from metadata alone (Parquet footers; a COCO file's annotations, which its check
    parsed), None where only reading the records would tell (progress then shows no total)."""
    if not requested(opts):
        return None
    texts = caption_texts(opts)
    if texts is not None:
        return len(texts)
    files = input_files(opts)
    if any(f.format not in ("parquet", "img2dataset") for f in files):
        return None
    return sum(_parquet_facts(f.path, f.version).num_rows for f in files)


def caption_texts(opts) -> list | None:
    """Every caption of a single COCO captions file (its check parsed it anyway), else None: the progress totals
    that need the captions themselves (the LLM's prompts) are then shown as unknown."""
    files = input_files(opts) if requested(opts) else []
    if len(files) == 1 and files[0].format == "coco" and files[0].size <= COCO_CHECKED_BYTES:
        f = files[0]
        return _known_last("coco captions", f.path, f.version, lambda: coco.caption_texts(f.path))
    return None


# ---------------------------------------------------------------------------------------------------- records

def normalise(raw, name: str, index: int, columns: Columns, bounds: InputBounds = DEFAULT_BOUNDS,
              download_status: bool = False) -> dict:
    """One corpus record -> the pipeline's caption record; Reject names what is wrong, Discard an image that
    img2dataset could not fetch. `download_status`: the record is img2dataset's, whose `status` says whether its
    image was fetched (elsewhere a `status` column is the corpus's own, and means nothing here)."""
    if not isinstance(raw, dict):
        raise Reject("not_an_object", f"expected a record, got {type(raw).__name__}")
    bounds.check_depth(raw)
    status = raw.get("status") if download_status else "success"
    if status != "success":  # a null status (a row img2dataset never fetched) is no success either
        if status not in DOWNLOAD_FAILED:
            shown = "null" if status is None else repr(printable(str(status))[:40])
            raise Reject("unknown_status", f"img2dataset status {shown} is none of success, "
                                           f"{', '.join(DOWNLOAD_FAILED)}")
        raise Discard("image_not_downloaded", f"img2dataset status {status}: "
                                              f"{cut(printable(str(raw.get('error_message') or '')), 300)}")
    key = raw.get(columns.key)
    if isinstance(key, bool) or not isinstance(key, (str, int)) or not str(key).strip():
        raise Reject("bad_key", f"{columns.key} must be a non-empty string or integer, got {key!r:.60}")
    key = str(key).strip()
    if len(key) > 1000:
        raise Reject("bad_key", f"{columns.key} has {len(key):,} characters")
    if has_surrogates(key):
        raise Reject("invalid_utf8", f"{columns.key} has bytes that are not UTF-8")
    caption = bounds.caption(raw.get(columns.caption), "caption").strip()
    image = raw.get(columns.image)
    if image is not None:  # none given (no such column, null) is no image reference; a wrong one is not dropped
        if not isinstance(image, str) or not image.strip():
            raise Reject("bad_image", f"{columns.image} must be a non-empty string (a URL or a path), got "
                                      f"{image!r:.80}")
        image = bounds.text(image.strip(), columns.image)
    remote = image is not None and has_scheme(image)
    return {"example_id": example_id(SOURCE, key), "source": SOURCE, "source_file": name, "source_index": index,
            "caption_id": None, "image_id": None, "key": key, "file_name": None if remote else image,
            "image_url": image if remote else None, "caption": caption}


class _ReadUnit(beam.DoFn):
    """A unit -> records, rejected and discarded dead letters, (file, records read), and the line of a file that
    is not the version the launcher planned (PROBLEMS)."""

    def __init__(self, stage: str, table: str, columns: Columns, bounds: InputBounds):
        self.stage, self.table, self.columns, self.bounds = stage, table, columns, bounds

    def process(self, unit: Unit):
        f = unit.file
        read = 0
        try:
            for index, raw in _raw_records(unit, self.columns, self.bounds):
                read += 1
                if isinstance(raw, Reject):
                    yield reject_letter(self.stage, self.table, SOURCE, f.name, index, raw, None, self.bounds)
                    continue
                try:
                    yield normalise(raw, f.name, index, self.columns, self.bounds, f.format == "img2dataset")
                except Discard as skip:
                    yield beam.pvalue.TaggedOutput(DISCARDED, dead_letter(
                        self.stage, self.table, SOURCE, f.name, index, skip, _shown(raw, self.columns)))
                except Reject as skip:
                    yield reject_letter(self.stage, self.table, SOURCE, f.name, index, skip, raw, self.bounds)
        except InputChanged as e:
            yield beam.pvalue.TaggedOutput(PROBLEMS, problem_count(str(e)))
        except OSError as e:  # gone, or unreadable now: not what was planned either
            yield beam.pvalue.TaggedOutput(PROBLEMS, problem_count(f"{f.path}: cannot read it any more "
                                                                   f"({e.strerror or e})"))
        yield beam.pvalue.TaggedOutput(READ, (f.name, read))


def _shown(raw: dict, columns: Columns) -> dict:
    """What a dead letter keeps of a record: its key, caption and image columns (not an image's bytes)."""
    return {k: raw.get(k) for k in columns.read() if k in raw and not isinstance(raw.get(k), bytes)}


def _raw_records(unit: Unit, columns: Columns, bounds: InputBounds = DEFAULT_BOUNDS):
    """(position in the file, record dict or the Reject of an unreadable one) of the unit, read from the version
    of the file the launcher planned (InputChanged otherwise)."""
    reader = {"parquet": _parquet_records, "img2dataset": _parquet_records, "jsonl": _jsonl_records,
              "csv": _csv_records, "webdataset": _tar_records}[unit.file.format]
    with opened_as_planned(unit.file.path, unit.file.version) as f:
        yield from reader(f, unit, columns, bounds)


class Unread:
    """A Parquet cell of a type no column read may have (a list, a struct): never made into Python objects, which
    could be any size; normalise rejects it as the wrong type, and its dead letter names the type."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self):
        return f"<a {self.type_name} value, not read>"


def _parquet_records(f, unit: Unit, columns: Columns, bounds: InputBounds):
    """The rows of the unit's row groups. A row whose text cells hold more than --max_record_bytes is rejected
    (record_too_large) before it becomes Python strings."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipeline.tables.shards import VERIFY_PAGES

    if unit.end <= unit.start:
        return
    parquet = pq.ParquetFile(f, **VERIFY_PAGES)
    wanted = [c for c in columns.read() if c in parquet.schema_arrow.names]
    position = unit.first_row
    for batch in parquet.iter_batches(batch_size=4096, row_groups=list(range(unit.start, unit.end)),
                                      columns=wanted, use_threads=False):
        # dictionary-encoded columns (pandas categoricals) as their values
        batch = pa.RecordBatch.from_arrays([pc.dictionary_decode(c) if pa.types.is_dictionary(c.type) else c
                                            for c in batch.columns], names=batch.schema.names)
        text = lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or \
            pa.types.is_large_binary(t)  # noqa: E731
        sizes = np.zeros(batch.num_rows, dtype=np.int64)
        for column in batch.columns:
            if text(column.type):
                sizes += pc.fill_null(pc.binary_length(column), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        fields = list(batch.schema)
        scalar = [f.name for f in fields if text(f.type) or pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
                  or pa.types.is_boolean(f.type) or pa.types.is_null(f.type)]
        unread = {f.name: Unread(str(f.type)) for f in fields if f.name not in scalar}
        small = batch.select(scalar).filter(pa.array(sizes <= bounds.max_record_bytes))
        kept = iter(small.to_pylist())
        for size in sizes:
            yield position, (bounds.too_large(int(size), f"row {position:,}") if size > bounds.max_record_bytes
                             else {**next(kept), **unread})
            position += 1


BOM = b"\xef\xbb\xbf"


def parse_object(data: bytes, what: str):
    """A JSON record as parsed, or the Reject of one that is not JSON or names a field twice."""
    text = data.decode("utf-8", errors="surrogateescape").strip()
    try:
        value = json.loads(text, object_pairs_hook=fields_of)
    except (ValueError, RecursionError) as e:
        return Reject("not_json", f"{what}: {str(e)[:200]}")
    if repeated_name(value) is not None:
        return Reject("repeated_field", f"{what}: field {printable(repeated_name(value))[:80]!r} appears twice; "
                                        f"which one holds it cannot be told")
    return value


def _jsonl_records(f, unit: Unit, columns: Columns, bounds: InputBounds):
    """The lines that begin in [start, end): a range owns the line that begins in it, so ranges split a file
    exactly. A record's position is its line's byte offset."""
    for offset, line in bounded_lines(f, unit.start, unit.end, bounds.max_record_bytes):
        if isinstance(line, LongLine):
            yield offset, bounds.too_large(line.size, f"the line at byte {offset:,}")
            continue
        if offset == 0:
            line = line.removeprefix(BOM)
        if line.strip():
            yield offset, parse_object(line, f"line at byte {offset:,}")


def _csv_records(f, unit: Unit, columns: Columns, bounds: InputBounds):
    """The records of a CSV or TSV file by its header, each by pipeline/sources/delimited.py's rules; a record's
    position is its line number (the header is line 1)."""
    delimiter = delimited.delimiter_of(unit.file.path)
    first = f.readline(SNIFF_BYTES)  # the header, which the launcher checked in this version (csv_header)
    header = delimited.split_line(first.removeprefix(BOM).rstrip(b"\n").removesuffix(b"\r").decode("utf-8"),
                                  delimiter)
    for number, (offset, line) in enumerate(bounded_lines(f, len(first), 2**63, bounds.max_record_bytes), 2):
        if isinstance(line, LongLine):
            yield number, bounds.too_large(line.size, f"line {number:,}")
            continue
        text = line.decode("utf-8", errors="surrogateescape")
        if not text.strip():
            continue
        try:
            record = delimited.record_of(header, text, delimiter)
        except Reject as skip:
            yield number, skip
            continue
        if record.get(columns.image) == "":  # CSV's only way to say none
            record[columns.image] = None
        yield number, record


def _tar_records(f, unit: Unit, columns: Columns, bounds: InputBounds):
    """webdataset samples, as pipeline/publish/image_shards.tar_samples groups a tar's members (the trainer's
    index reads them the same way): its caption is the .txt member (or the caption column of its .json), its key
    the sample's name (webdataset's __key__: what the trainer finds its image by, whatever key column a re-sharded
    set's .json keeps). Image members are not read; text members only up to --max_record_bytes."""
    ordinal = 0
    keep = lambda member: suffix_of(member.name) in TEXT_SUFFIXES and member.size <= bounds.max_record_bytes  # noqa
    try:
        with tarfile.open(fileobj=f, mode="r|*") as tar:
            for sample in tar_samples(tar, keep):
                yield ordinal, _sample_record(sample, columns, unit.file.name, bounds)
                ordinal += 1
    except (tarfile.TarError, OSError, EOFError) as e:
        yield ordinal, Reject("bad_tar", f"{unit.file.name} after sample {ordinal}: {str(e)[:300]}")


def _sample_record(sample, columns: Columns, tar_name: str, bounds: InputBounds):
    problem = sample.problem()
    if problem is not None:
        return Reject(*problem)
    texts = {}
    for suffix in TEXT_SUFFIXES:
        member = sample.member(suffix)
        if member is None:
            continue
        if member.size > bounds.max_record_bytes:
            return bounds.too_large(member.size, f"sample {sample.key}'s .{suffix}")
        texts[suffix] = sample.data[member.name]
    record = {}
    if "json" in texts:
        meta = parse_object(texts["json"], f"sample {sample.key}'s .json")
        if isinstance(meta, Reject):
            return Reject("bad_json", meta.detail) if meta.reason == "not_json" else meta
        record = dict(meta) if isinstance(meta, dict) else {}
    if "txt" in texts:
        record[columns.caption] = texts["txt"].decode("utf-8", errors="surrogateescape")
    record[columns.key] = sample.key
    return record


def _first_of_key(item):
    """(key, records) -> the first record (by file and position) and the others as rejected letters."""
    _, records = item
    records = sorted(records, key=lambda r: (r["source_file"], r["source_index"]))
    yield records[0]
    for other in records[1:]:
        yield beam.pvalue.TaggedOutput(REJECTED, other)


TAGS = ("records", REJECTED, DISCARDED, READ, PROBLEMS)


class ReadCorpus(beam.PTransform):
    """Caption files -> {"records", "rejected", "discarded", "read": (file, records read), "problems": the counts
    of input problems (a file changed since the launcher planned it)}."""

    def __init__(self, files: list[InputFile], stage: str, table: str, columns: Columns,
                 bounds: InputBounds = DEFAULT_BOUNDS):
        super().__init__()
        self.files, self.stage, self.table, self.columns, self.bounds = files, stage, table, columns, bounds

    def expand(self, pbegin):
        cocos = [f for f in self.files if f.format == "coco"]
        others = [f for f in self.files if f.format != "coco"]
        parts = []
        for i, f in enumerate(cocos):  # one JSON object each: parsed whole by one worker
            parts.append(pbegin | f"Coco{i or ''}" >> coco.ReadCocoCaptions(
                f.path, self.stage, self.table, self.bounds, source_file=f.name, version=f.version))
        if others:
            read = (pbegin | "Units" >> beam.Create(units(others)) | "SpreadUnits" >> beam.Reshuffle()
                    | "ReadUnits" >> beam.ParDo(_ReadUnit(self.stage, self.table, self.columns, self.bounds))
                    .with_outputs(REJECTED, DISCARDED, READ, PROBLEMS, main="records"))
            parts.append({tag: read[tag] for tag in TAGS})
        flat = {tag: [p[tag] for p in parts if tag in p] or [pbegin | f"No{tag.title()}" >> beam.Create([])]
                for tag in TAGS}
        merged = {tag: pcolls | f"All{tag.title()}" >> beam.Flatten() for tag, pcolls in flat.items()}
        if len(self.files) > 1 or others:  # keys are the corpus's: one record per key across its files
            # by the key itself, not example_id: a COCO file's ("coco", id) and a JSONL file's ("captions", key)
            # differ for the same key, and both records became rows
            unique = (spill.group_by_key(merged["records"] | "ByKey" >> beam.Map(lambda r: (r["key"], r)),
                                         "GroupKeys")
                      | "FirstOfKey" >> beam.FlatMap(_first_of_key).with_outputs(REJECTED, main="records"))
            seen_again = unique[REJECTED] | "DuplicateLetters" >> beam.Map(self._duplicate)
            merged["records"] = unique.records
            merged[REJECTED] = (merged[REJECTED], seen_again) | "WithDuplicates" >> beam.Flatten()
        return merged

    def _duplicate(self, record: dict) -> dict:
        return dead_letter(self.stage, self.table, record["source"], record["source_file"], record["source_index"],
                           Reject(DUPLICATE_KEY, f"key {record['key']!r:.80} appears earlier in the corpus"), record)


def input_problems(pipeline: beam.Pipeline) -> list:
    """The PCollections of input-problem counts of every corpus read of the pipeline: pipeline/run.py adds them to
    the stage's counts, and a run with any fails naming them."""
    return pipeline.__dict__.setdefault("_hardpos_input_problems", [])


def read_captions(pipeline: beam.Pipeline, opts, stage: str, table: str, bounds: InputBounds = DEFAULT_BOUNDS) -> dict:
    """ReadCorpus for one table, the files read once per pipeline however many tables read them; each table
    gets the records, the read counts and the dead letters as its own."""
    reads = pipeline.__dict__.setdefault("_hardpos_corpus_reads", {})
    files = input_files(opts)
    key = (tuple(files), Columns.of(opts), repr(bounds))
    if key not in reads:
        reads[key] = pipeline | f"ReadCaptions{len(reads) or ''}" >> ReadCorpus(files, stage, table, Columns.of(opts),
                                                                                bounds)
        input_problems(pipeline).append(reads[key][PROBLEMS])
    shared = reads[key]
    labelled = {tag: shared[tag] | f"{tag.title()}CaptionsOf{table}" >> beam.Map(coco.labelled, stage, table)
                for tag in (REJECTED, DISCARDED)}
    return {"records": shared["records"], READ: shared[READ], **labelled}


def reference_files(opts) -> list[InputFile]:
    return input_files(_ReferenceOptions(split_patterns(opts.reference_captions), opts))


def read_reference(pipeline: beam.Pipeline, opts, bounds: InputBounds = DEFAULT_BOUNDS):
    """The records of --reference_captions (their statistics only: never rows, never counted in a report). A
    reference file that gives no caption at all (another format than it was read as, other column names) fails
    the run naming it: made_from would list a reference that shaped nothing."""
    read = pipeline | "ReadReference" >> ReadCorpus(reference_files(opts), "reference", "reference",
                                                    Columns.of(opts), bounds)
    per_file = [read[READ] | "ReferenceRead" >> beam.Map(lambda file_n: (file_n[0], Counter(read=file_n[1]))),
                read["records"] | "ReferenceKept" >> beam.Map(lambda r: (r["source_file"], Counter(kept=1))),
                (read[REJECTED], read[DISCARDED]) | "ReferenceLetters" >> beam.Flatten()
                | "ReferenceReasons" >> beam.Map(lambda d: (d["source_file"], Counter({d["reason"]: 1})))]
    summed = [p | f"SumReference{i}" >> beam.CombinePerKey(_sum_counters) for i, p in enumerate(per_file)]
    empty = (summed | "AllReferenceCounts" >> beam.Flatten() | "ByReferenceFile" >> beam.CombinePerKey(_sum_counters)
             | "ReferenceGaveNothing" >> beam.FlatMap(_gave_nothing))
    input_problems(pipeline).extend([read[PROBLEMS], empty])
    return read["records"]


def _sum_counters(counters) -> Counter:
    total = Counter()
    for c in counters:
        total.update(c)
    return total


def _gave_nothing(item):
    name, counts = item
    if counts["kept"]:
        return
    reasons = ", ".join(f"{reason} {n:,}" for reason, n in sorted(counts.items()) if reason not in ("read", "kept"))
    yield problem_count(f"--reference_captions: {name} gave no caption ({counts['read']:,} records read"
                        f"{': ' + reasons if reasons else ''}); is --reference_captions_format right for it, and "
                        f"are its columns --caption_column and --id_column?")


class _ReferenceOptions:
    """--reference_captions seen as --captions (its own format flag, the same column flags)."""

    flag = "--reference_captions"

    def __init__(self, patterns: list[str], opts):
        self.captions, self.coco_captions = patterns, None
        self.captions_format = getattr(opts, "reference_captions_format", "auto")
        self.caption_column, self.id_column, self.image_column = opts.caption_column, opts.id_column, \
            opts.image_column
