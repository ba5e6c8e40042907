"""Caption corpora as researchers have them: img2dataset's shards (its parquet metadata, or webdataset tars),
Parquet, JSONL or CSV files, and COCO captions files; any number of files (`--captions=PATTERN`, Beam file
patterns, repeatable or comma-separated).

Reading is spread over the workers: a unit is a file, or a range of one (a Parquet row group, 64 MiB of JSONL);
the launcher lists the files and reads Parquet footers and the first bytes of the others, never the records. A
record keeps the corpus's own key (string) and image reference, so that a training row finds its image again;
example_id is a hash of ("captions", key) (COCO files keep ("coco", caption id), as they always had). Every record
is accounted for per input file: read = rows + discarded (img2dataset's failed downloads, with their error) +
rejected (malformed records, a key seen before).
"""
from __future__ import annotations

import csv
import io
import json
import os
import posixpath
import tarfile
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.io import spill
from pipeline.io.dead_letters import DISCARDED, REJECTED, dead_letter
from pipeline.options import UsageError
from pipeline.perturb.outcomes import Discard, Reject
from pipeline.publish.image_shards import IMAGE_SUFFIXES, sample_key
from pipeline.records import example_id
from pipeline.sources import coco
from pipeline.sources.files import DEFAULT_BOUNDS, READ, InputBounds, reject_letter

SOURCE = "captions"
FORMATS = ("auto", "coco", "img2dataset", "webdataset", "parquet", "jsonl", "csv")
RANGE_BYTES = 64 << 20  # a JSONL file is read in ranges of this many bytes, each by any worker
SNIFF_BYTES = 1 << 16
# A COCO captions file is one JSON object a worker must parse whole; up to this size the launcher parses it too,
# to say what is wrong with it in one line and to count its captions for the progress totals (COCO's own files
# are 25 and 91 MB). A larger one is only sniffed: its problems become a dead letter of the run.
COCO_CHECKED_BYTES = 256 << 20
DUPLICATE_KEY = "duplicate_key"


@dataclass(frozen=True)
class Columns:
    """Where a record's caption, key and image reference are (img2dataset's names by default)."""

    caption: str = "caption"
    key: str = "key"
    image: str = "url"

    @classmethod
    def of(cls, opts) -> Columns:
        return cls(opts.caption_column, opts.id_column, opts.image_column)


@dataclass(frozen=True)
class InputFile:
    path: str
    name: str        # source_file: the report's per-file accounting and the dead letters name it
    format: str
    size: int
    mtime: float = 0.0  # as the listing gave it: the fingerprint of a corpus too big to hash


@dataclass(frozen=True)
class Unit:
    """What one worker reads: a whole file (start = end = 0), Parquet row groups [start, end), or the JSONL lines
    that begin in bytes [start, end)."""

    file: InputFile
    start: int = 0
    end: int = 0


def split_patterns(values) -> list[str]:
    """A repeatable flag's values, each comma-separated, as one list of patterns (spaces around commas dropped)."""
    return [p.strip() for value in (values or []) for p in value.split(",") if p.strip()]


def patterns_of(opts) -> list[str]:
    """--captions as given (repeatable, each comma-separated), else --coco_captions."""
    return split_patterns(opts.captions) or ([opts.coco_captions] if opts.coco_captions else [])


def requested(opts) -> bool:
    return bool(patterns_of(opts))


def input_files(opts) -> list[InputFile]:
    """The files the patterns match, each with its format; UsageError (one line) for a pattern that matches
    nothing, a format that cannot be told, or columns a Parquet or CSV file does not have."""
    found: dict[str, tuple[int, float]] = {}
    for pattern in patterns_of(opts):
        try:
            matched = FileSystems.match([pattern])[0].metadata_list
        except Exception as e:  # FileSystems wraps local and remote errors alike
            raise UsageError(f"--captions: cannot list {pattern} ({str(e).splitlines()[0] if str(e) else e})") \
                from None
        files = [m for m in matched if not m.path.endswith("/")]
        if not files:
            raise UsageError(f"--captions: no file matches {pattern}" if opts.captions else
                             f"{pattern}: no such file")
        for m in files:
            found.setdefault(m.path, (m.size_in_bytes, getattr(m, "last_updated_in_seconds", 0.0) or 0.0))
    paths = sorted(found)
    names = _display_names(paths)
    fmt = opts.captions_format if opts.captions else "coco"
    out = [InputFile(p, names[p], resolve_format(p, fmt, *found[p]), *found[p]) for p in paths]
    for f in out:
        check_file(f, Columns.of(opts))
    return out


# A run lists its corpus several times (the checks, the fingerprint, the progress totals, the read units; again
# per stage of --stage=all): what was learnt of a file's contents is kept by the file's version, so that the
# launcher reads each Parquet footer once (21 times per file in a --stage=all run before; each one a request on
# object storage) and hashes or parses a file once.
_KNOWN: dict[tuple, object] = {}


def _version(path: str, size: int, mtime: float) -> tuple | None:
    """What tells this version of a file from another: a local file's inode, size and change times, else the
    listing's size and modification time; None when nothing does (the file is then read again each time)."""
    if "://" not in path:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
    return (path, size, mtime) if mtime else None


def _known(kind: str, version: tuple | None, compute):
    if version is None:
        return compute()
    key = (kind, *version)
    if key not in _KNOWN:
        _KNOWN[key] = compute()
    return _KNOWN[key]


_LAST: dict[str, tuple] = {}


def _known_last(kind: str, version: tuple | None, compute):
    """As _known, keeping only the last file's value of a kind (a COCO file's captions: not a list per file)."""
    if version is None:
        return compute()
    held = _LAST.get(kind)
    if held is None or held[0] != version:
        held = _LAST[kind] = (version, compute())
    return held[1]


def _display_names(paths: list[str]) -> dict[str, str]:
    """Each file's basename, or its path below the files' common folder where two share a basename."""
    bases = [posixpath.basename(p.replace("\\", "/")) for p in paths]
    if len(set(bases)) == len(bases):
        return dict(zip(paths, bases, strict=True))
    common = posixpath.commonpath([posixpath.dirname(p.replace("\\", "/")) for p in paths])
    return {p: posixpath.relpath(p.replace("\\", "/"), common) for p in paths}


def resolve_format(path: str, requested_format: str, size: int = 0, mtime: float = 0.0) -> str:
    """The format asked for, or with auto the one the file's name says (a Parquet file with img2dataset's
    `status` column is img2dataset's)."""
    if requested_format != "auto":
        return requested_format
    name = path.lower()
    for suffix, fmt in ((".json", "coco"), (".jsonl", "jsonl"), (".ndjson", "jsonl"), (".csv", "csv"),
                        (".tsv", "csv"), (".tar", "webdataset")):
        if name.endswith(suffix):
            return fmt
    if name.endswith(".parquet"):
        return "img2dataset" if "status" in _parquet_facts(path, size, mtime).names else "parquet"
    raise UsageError(f"--captions_format=auto: cannot tell the format of {path} from its name; name it "
                     f"(--captions_format={'|'.join(FORMATS[1:])})")


@dataclass(frozen=True)
class ParquetFacts:
    names: tuple[str, ...]
    num_rows: int
    num_row_groups: int


def _parquet_facts(path: str, size: int = 0, mtime: float = 0.0) -> ParquetFacts:
    """A Parquet file's column names and row and row-group counts, from its footer (read once per version)."""
    import pyarrow.parquet as pq

    def read() -> ParquetFacts:
        try:
            with FileSystems.open(path) as f:
                parquet = pq.ParquetFile(f)
                return ParquetFacts(tuple(parquet.schema_arrow.names), parquet.metadata.num_rows,
                                    parquet.metadata.num_row_groups)
        except Exception as e:
            raise UsageError(f"{path}: not a Parquet file ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
                from None

    return _known("parquet", _version(path, size, mtime), read)


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
    _known(f"checked {f.format} {columns}", _version(f.path, f.size, f.mtime), lambda: _check_file(f, columns))


def _check_file(f: InputFile, columns: Columns) -> bool:
    if f.format in ("parquet", "img2dataset"):
        names = _parquet_facts(f.path, f.size, f.mtime).names
        missing = [c for c in (columns.caption, columns.key) if c not in names]
        if missing:
            raise UsageError(f"{f.path}: no column {missing[0]!r} (columns: {', '.join(names)}); name it with "
                             f"--{'caption' if missing[0] == columns.caption else 'id'}_column")
    elif f.format == "csv":
        header = next(csv.reader(io.StringIO(_head(f.path).decode("utf-8-sig", "replace").split("\n", 1)[0]),
                                 dialect=csv_dialect(f.path)), [])
        missing = [c for c in (columns.caption, columns.key) if c not in header]
        if missing:
            raise UsageError(f"{f.path}: no column {missing[0]!r} in its header ({', '.join(header)}); name it "
                             f"with --{'caption' if missing[0] == columns.caption else 'id'}_column")
    elif f.format == "coco" and f.size <= COCO_CHECKED_BYTES:
        coco.check_file(f.path)
    elif f.format == "coco" and not _head(f.path).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        raise UsageError(f"{f.path}: not a COCO captions file (not a JSON object)")
    elif f.format == "webdataset" and not tarfile.is_tarfile(io.BytesIO(_head(f.path) + b"\0" * 1024)):
        raise UsageError(f"{f.path}: not a tar file (--captions_format=webdataset)")
    return True


def units(files: list[InputFile]) -> list[Unit]:
    """The work: a Parquet file's row groups and a JSONL file's byte ranges apart, other files whole."""
    out = []
    for f in files:
        if f.format in ("parquet", "img2dataset"):
            groups = _parquet_facts(f.path, f.size, f.mtime).num_row_groups
            out += [Unit(f, g, g + 1) for g in range(groups)] or [Unit(f, 0, 0)]
        elif f.format == "jsonl" and f.size > RANGE_BYTES:
            out += [Unit(f, start, min(start + RANGE_BYTES, f.size)) for start in range(0, f.size, RANGE_BYTES)]
        else:
            out.append(Unit(f, 0, f.size if f.format == "jsonl" else 0))
    return out


# Up to this many bytes of caption files the fingerprint is their contents' sha256; past it, each file's name, size
# and modification time (hashing 10 M captions would read the whole corpus in the launcher).
FINGERPRINT_BYTES = 1 << 30


def fingerprint(opts, files: list[InputFile] | None = None) -> str:
    """What identifies the corpus --captions reads (or `files`), for train_set's check that its tables were made
    from it."""
    import hashlib

    files = input_files(opts) if files is None else files
    digest = hashlib.sha256()
    whole = sum(f.size for f in files) <= FINGERPRINT_BYTES
    for f in files:
        if whole:
            from pipeline.sources.files import input_sha256

            part = _known("sha256", _version(f.path, f.size, f.mtime), lambda f=f: input_sha256(f.path))
        else:
            part = f"{f.size}:{f.mtime}"
        digest.update(f"{f.name}\x1f{f.format}\x1f{part}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


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
    return sum(_parquet_facts(f.path, f.size, f.mtime).num_rows for f in files)


def caption_texts(opts) -> list | None:
    """Every caption of a single COCO captions file (its check parsed it anyway), else None: the progress totals
    that need the captions themselves (the LLM's prompts) are then shown as unknown."""
    files = input_files(opts) if requested(opts) else []
    if len(files) == 1 and files[0].format == "coco" and files[0].size <= COCO_CHECKED_BYTES:
        f = files[0]
        return _known_last("coco captions", _version(f.path, f.size, f.mtime), lambda: coco.caption_texts(f.path))
    return None


# ---------------------------------------------------------------------------------------------------- records

def normalise(raw, name: str, index: int, columns: Columns, bounds: InputBounds = DEFAULT_BOUNDS) -> dict:
    """One corpus record -> the pipeline's caption record; Reject names what is wrong, Discard an image that
    img2dataset could not fetch."""
    if not isinstance(raw, dict):
        raise Reject("not_an_object", f"expected a record, got {type(raw).__name__}")
    bounds.check_depth(raw)
    status = raw.get("status")
    if status is not None and status != "success":
        raise Discard("image_not_downloaded", f"img2dataset status {str(status)[:40]}: "
                                              f"{str(raw.get('error_message') or '')[:300]}")
    key = raw.get(columns.key)
    if isinstance(key, bool) or not isinstance(key, (str, int)) or not str(key).strip():
        raise Reject("bad_key", f"{columns.key} must be a non-empty string or integer, got {key!r:.60}")
    key = str(key).strip()
    if len(key) > 1000:
        raise Reject("bad_key", f"{columns.key} has {len(key):,} characters")
    caption = bounds.caption(raw.get(columns.caption), "caption").strip()
    image = raw.get(columns.image)
    image = image.strip() if isinstance(image, str) and image.strip() else None
    remote = image is not None and "://" in image
    return {"example_id": example_id(SOURCE, key), "source": SOURCE, "source_file": name, "source_index": index,
            "caption_id": None, "image_id": None, "key": key, "file_name": None if remote else image,
            "image_url": image if remote else None, "caption": caption}


class _ReadUnit(beam.DoFn):
    """A unit -> records, rejected and discarded dead letters, (file, records read)."""

    def __init__(self, stage: str, table: str, columns: Columns, bounds: InputBounds):
        self.stage, self.table, self.columns, self.bounds = stage, table, columns, bounds

    def process(self, unit: Unit):
        f = unit.file
        read = 0
        for index, raw in _raw_records(unit, self.columns):
            read += 1
            if isinstance(raw, Reject):
                yield reject_letter(self.stage, self.table, SOURCE, f.name, index, raw, None, self.bounds)
                continue
            try:
                yield normalise(raw, f.name, index, self.columns, self.bounds)
            except Discard as skip:
                yield beam.pvalue.TaggedOutput(DISCARDED, dead_letter(
                    self.stage, self.table, SOURCE, f.name, index, skip, _shown(raw, self.columns)))
            except Reject as skip:
                yield reject_letter(self.stage, self.table, SOURCE, f.name, index, skip, raw, self.bounds)
        yield beam.pvalue.TaggedOutput(READ, (f.name, read))


def _shown(raw: dict, columns: Columns) -> dict:
    """What a dead letter keeps of a record: its key, caption and image columns (not an image's bytes)."""
    return {k: raw.get(k) for k in (columns.key, columns.caption, columns.image, "status", "error_message")
            if k in raw and not isinstance(raw.get(k), bytes)}


def _raw_records(unit: Unit, columns: Columns):
    """(position in the file, record dict or the Reject of an unreadable one) of the unit."""
    reader = {"parquet": _parquet_records, "img2dataset": _parquet_records, "jsonl": _jsonl_records,
              "csv": _csv_records, "webdataset": _tar_records}[unit.file.format]
    yield from reader(unit, columns)


def _parquet_records(unit: Unit, columns: Columns):
    import pyarrow.parquet as pq

    from pipeline.tables.shards import VERIFY_PAGES

    with FileSystems.open(unit.file.path) as f:
        parquet = pq.ParquetFile(f, **VERIFY_PAGES)
        wanted = [c for c in (columns.key, columns.caption, columns.image, "status", "error_message")
                  if c in parquet.schema_arrow.names]
        first = sum(parquet.metadata.row_group(g).num_rows for g in range(unit.start))
        for g in range(unit.start, unit.end):
            rows = parquet.read_row_group(g, columns=list(dict.fromkeys(wanted))).to_pylist()
            for i, row in enumerate(rows):
                yield first + i, row
            first += len(rows)


def _jsonl_records(unit: Unit, columns: Columns):
    """The lines that begin in [start, end): a range owns the line that begins in it, so ranges split a file
    exactly. A record's position is its line's byte offset."""
    with FileSystems.open(unit.file.path, compression_type="uncompressed") as f:
        f.seek(unit.start)
        position = unit.start
        if unit.start > 0:  # the line under way belongs to the range before
            f.seek(unit.start - 1)
            position = unit.start - 1 + len(f.readline())
        while position < unit.end:
            line = f.readline()
            if not line:
                break
            offset, position = position, position + len(line)
            text = line.decode("utf-8", errors="surrogateescape").strip()
            if not text:
                continue
            try:
                yield offset, json.loads(text)
            except (json.JSONDecodeError, RecursionError) as e:
                yield offset, Reject("not_json", f"line at byte {offset}: {str(e)[:200]}")


def csv_dialect(path: str) -> str:
    return "excel-tab" if path.lower().endswith(".tsv") else "excel"


def _csv_records(unit: Unit, columns: Columns):
    with FileSystems.open(unit.file.path, compression_type="uncompressed") as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")
        reader = csv.DictReader(text, dialect=csv_dialect(unit.file.path))
        try:
            for row in reader:
                yield reader.line_num, row
        except csv.Error as e:  # a broken quote: the rest of the file cannot be told apart
            yield reader.line_num, Reject("bad_csv", str(e)[:300])


def _tar_records(unit: Unit, columns: Columns):
    """webdataset samples: the members that share a key (the name up to its first dot) are one sample; its
    caption is the .txt member (or the caption column of its .json), its key the .json's key column (or the
    sample's own key). Image members are not read: the trainer reads them by key from the tar itself (the same
    key: image_shards.sample_key)."""
    sample, group, ordinal = {}, None, 0
    with FileSystems.open(unit.file.path, compression_type="uncompressed") as raw:
        try:
            with tarfile.open(fileobj=raw, mode="r|*") as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    # a sample: its members' folder and key ("./000.jpg" and "000.txt" are sample "000")
                    name = posixpath.normpath(member.name)
                    this = (posixpath.dirname(name), sample_key(name))
                    if this != group and group is not None:
                        yield ordinal, _sample_record(group[1], sample, columns, unit.file.name)
                        ordinal, sample = ordinal + 1, {}
                    group = this
                    ext = posixpath.basename(name).partition(".")[2].lower()
                    if ext in ("txt", "json"):
                        sample[ext] = tar.extractfile(member).read()
                    elif ext in IMAGE_SUFFIXES:
                        sample["image"] = ext
        except (tarfile.TarError, OSError, EOFError) as e:
            yield ordinal, Reject("bad_tar", f"{unit.file.name} after sample {ordinal}: {str(e)[:200]}")
            return
    if group is not None:
        yield ordinal, _sample_record(group[1], sample, columns, unit.file.name)


def _sample_record(key: str, sample: dict, columns: Columns, tar_name: str):
    meta = {}
    if "json" in sample:
        try:
            meta = json.loads(sample["json"].decode("utf-8", errors="surrogateescape"))
        except (json.JSONDecodeError, RecursionError):
            return Reject("bad_json", f"sample {key}: its .json is not JSON")
        if not isinstance(meta, dict):
            meta = {}
    record = dict(meta)
    if "txt" in sample:
        record[columns.caption] = sample["txt"].decode("utf-8", errors="surrogateescape")
    record.setdefault(columns.key, key)
    if "image" not in sample:
        return Reject("no_image", f"sample {key} of {tar_name} has no image member")
    return record


def _first_of_key(item):
    """(example_id, records) -> the first record (by file and position) and the others as rejected letters."""
    _, records = item
    records = sorted(records, key=lambda r: (r["source_file"], r["source_index"]))
    yield records[0]
    for other in records[1:]:
        yield beam.pvalue.TaggedOutput(REJECTED, other)


class ReadCorpus(beam.PTransform):
    """Caption files -> {"records", "rejected", "discarded", "read": (file, records read)}."""

    def __init__(self, files: list[InputFile], stage: str, table: str, columns: Columns,
                 bounds: InputBounds = DEFAULT_BOUNDS):
        super().__init__()
        self.files, self.stage, self.table, self.columns, self.bounds = files, stage, table, columns, bounds

    def expand(self, pbegin):
        cocos = [f for f in self.files if f.format == "coco"]
        others = [f for f in self.files if f.format != "coco"]
        parts = []
        for i, f in enumerate(cocos):  # one JSON object each: parsed whole by one worker
            parts.append(pbegin | f"Coco{i or ''}" >> coco.ReadCocoCaptions(f.path, self.stage, self.table,
                                                                             self.bounds, source_file=f.name))
        if others:
            read = (pbegin | "Units" >> beam.Create(units(others)) | "SpreadUnits" >> beam.Reshuffle()
                    | "ReadUnits" >> beam.ParDo(_ReadUnit(self.stage, self.table, self.columns, self.bounds))
                    .with_outputs(REJECTED, DISCARDED, READ, main="records"))
            parts.append({"records": read.records, REJECTED: read[REJECTED], DISCARDED: read[DISCARDED],
                          READ: read[READ]})
        flat = {tag: [p[tag] for p in parts if tag in p] or [pbegin | f"No{tag.title()}" >> beam.Create([])]
                for tag in ("records", REJECTED, DISCARDED, READ)}
        merged = {tag: pcolls | f"All{tag.title()}" >> beam.Flatten() for tag, pcolls in flat.items()}
        if len(self.files) > 1 or others:  # keys are the corpus's: one record per key across its files
            unique = (spill.group_by_key(merged["records"] | "ByKey" >> beam.Map(lambda r: (r["example_id"], r)),
                                         "GroupKeys")
                      | "FirstOfKey" >> beam.FlatMap(_first_of_key).with_outputs(REJECTED, main="records"))
            seen_again = unique[REJECTED] | "DuplicateLetters" >> beam.Map(self._duplicate)
            merged["records"] = unique.records
            merged[REJECTED] = (merged[REJECTED], seen_again) | "WithDuplicates" >> beam.Flatten()
        return merged

    def _duplicate(self, record: dict) -> dict:
        return dead_letter(self.stage, self.table, record["source"], record["source_file"], record["source_index"],
                           Reject(DUPLICATE_KEY, f"key {record['key']!r:.80} appears earlier in the corpus"), record)


def read_captions(pipeline: beam.Pipeline, opts, stage: str, table: str, bounds: InputBounds = DEFAULT_BOUNDS) -> dict:
    """ReadCorpus for one table, the files read once per pipeline however many tables read them; each table
    gets the records, the read counts and the dead letters as its own."""
    reads = pipeline.__dict__.setdefault("_hardpos_corpus_reads", {})
    files = input_files(opts)
    key = (tuple(files), Columns.of(opts), repr(bounds))
    if key not in reads:
        reads[key] = pipeline | f"ReadCaptions{len(reads) or ''}" >> ReadCorpus(files, stage, table, Columns.of(opts),
                                                                                bounds)
    shared = reads[key]
    labelled = {tag: shared[tag] | f"{tag.title()}CaptionsOf{table}" >> beam.Map(coco.labelled, stage, table)
                for tag in (REJECTED, DISCARDED)}
    return {"records": shared["records"], READ: shared[READ], **labelled}


def reference_files(opts) -> list[InputFile]:
    return input_files(_ReferenceOptions(split_patterns(opts.reference_captions), opts))


def read_reference(pipeline: beam.Pipeline, opts, bounds: InputBounds = DEFAULT_BOUNDS):
    """The records of --reference_captions (their statistics only: never rows, never counted in a report)."""
    return (pipeline | "ReadReference" >> ReadCorpus(reference_files(opts), "reference", "reference",
                                                     Columns.of(opts), bounds))["records"]


class _ReferenceOptions:
    """--reference_captions seen as --captions (same format and column flags)."""

    def __init__(self, patterns: list[str], opts):
        self.captions, self.coco_captions = patterns, None
        self.captions_format = opts.captions_format
        self.caption_column, self.id_column, self.image_column = opts.caption_column, opts.id_column, \
            opts.image_column

