"""Reading source annotation files: file-level problems are fatal with one clear line, record-level ones are not."""
from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections import Counter
from dataclasses import asdict, dataclass

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.folder_lock import kernel_file
from pipeline.io.dead_letters import REJECTED, dead_letter
from pipeline.options import (
    JSON_DEPTH_LIMIT,
    MAX_CAPTION_CHARS,
    MAX_CAPTION_WORDS,
    MAX_JSON_DEPTH,
    MAX_RECORD_BYTES,
)
from pipeline.perturb.outcomes import Reject
from pipeline.perturb.text import has_surrogates, printable
from pipeline.tables.shards import stream_sha256
from pipeline.urls import has_scheme

READ = "read"
# Tagged output of a read: ((INPUT_PROBLEM, line), 1) for an input that must fail the run, which pipeline/run.py
# adds to the stage's counts (a file changed since the launcher planned it).
PROBLEMS = "problems"
INPUT_PROBLEM = "input_problem"
INT64 = range(-2**63, 2**63)  # ids become int64 columns
# A string token (escapes included) or a bracket: enough to follow the nesting of a JSON text without parsing it.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class InputFileError(Exception):
    """A missing, unreadable or malformed input file. The message is one line naming the path."""


class InputChanged(Exception):
    """An input file that is not the version the launcher planned and fingerprinted: one line naming it."""


def problem_count(line: str):
    """The count that carries an input problem to the report, which fails the run with the line."""
    return (INPUT_PROBLEM, line), 1


# ------------------------------------------------------------------------------------------- versions of a file
# The launcher plans a run's work from what it lists and reads of each input file (its size, a Parquet footer's row
# groups, the sha256 that report.json's made_from records); a worker that read another version (the file appended
# to, or replaced by a rename, while the run goes on) would give rows of a file nobody fingerprinted. Each reader
# checks the version where it reads.

def local_version(path: str) -> tuple:
    """What tells this version of a local file from another: its inode, size and change times (a rename over it
    changes the inode, an append the size and times). OSError when it cannot be read."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _fd_version(fd: int) -> tuple:
    st = os.fstat(fd)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def remote_version(path: str) -> tuple:
    """An object's size and modification time as its file system lists them."""
    metadata = FileSystems.match([path])[0].metadata_list
    if not metadata:
        raise FileNotFoundError(path)
    return metadata[0].size_in_bytes, getattr(metadata[0], "last_updated_in_seconds", 0.0) or 0.0


def _size(version: tuple) -> int:
    return version[1] if len(version) == 4 else version[0]


def _changed(path: str, planned: tuple, found: tuple) -> InputChanged:
    sizes = f"{_size(planned):,} bytes planned, {_size(found):,} now"
    return InputChanged(f"{path}: changed while the run read it ({sizes}): it is not the version the run planned "
                        f"and fingerprinted; run again once it stays put")


@contextlib.contextmanager
def opened_as_planned(path: str, planned: tuple):
    """The file opened for binary reading, once it is the version `planned` (local_version / remote_version), and
    still that version after the caller is done with it (a local file written to in place meanwhile); else
    InputChanged. An empty `planned` checks nothing."""
    if has_scheme(path):
        if planned and remote_version(path) != planned:
            raise _changed(path, planned, remote_version(path))
        with FileSystems.open(path, compression_type="uncompressed") as f:
            yield f
        return
    with open(path, "rb") as f:
        if planned and _fd_version(f.fileno()) != planned:
            raise _changed(path, planned, _fd_version(f.fileno()))
        yield f
        if planned and _fd_version(f.fileno()) != planned:
            raise _changed(path, planned, _fd_version(f.fileno()))


def regular_file_problem(path: str) -> str | None:
    """Why a local input path cannot be read as a file (a FIFO, a device such as /dev/zero, a folder): opening
    or hashing one would block or never end. None for a regular file (a link to one included) or a URL."""
    if has_scheme(path):
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        return f"cannot read ({e.strerror or e})"
    if kernel_file(path):  # /proc/self/environ is "regular", and holds the process's secrets
        return f"a file of the kernel's ({os.path.realpath(path)}), not data: only files are read"
    if stat.S_ISREG(mode):
        return None
    kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
        "a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
    return f"{kind}, not a regular file: only files are read"


# ------------------------------------------------------------------------------------------------- bounded lines

class LongLine:
    """A line longer than the bound: never held, only measured."""

    def __init__(self, size: int):
        self.size = size


SKIP_CHUNK = 1 << 20


def _skip_line(f, most: int | None = None) -> tuple[int, bool]:
    """Reads past the rest of the current line in bounded chunks, or past `most` bytes of it, whichever comes
    first: (the bytes read, whether the line's end was reached)."""
    skipped = 0
    while most is None or skipped < most:
        chunk = f.readline(SKIP_CHUNK if most is None else min(SKIP_CHUNK, most - skipped))
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped, True
    return skipped, False


def _record(line: bytes) -> bytes:
    """A line without its line break (LF, or CRLF): the terminator is no part of the record or of its size."""
    return line.removesuffix(b"\n").removesuffix(b"\r")


def bounded_lines(f, start: int, end: int, limit: int):
    """(byte offset, line without its line break, or LongLine) for each line of the binary file f that begins in
    [start, end): a range owns the line that begins in it, so ranges split a file exactly. No line is held
    longer than `limit` bytes, however long it is (a 500 MB line is read past in 1 MiB chunks); `limit` bounds
    the record, not its line break (LF or CRLF alike). A range reads at most its own bytes to find its first
    line: a line under way at its start that runs past its end is its owner's (read once, by the range it begins
    in), not read again by every range it spans (a 3 GiB line read 48 times was quadratic)."""
    position = start
    if start > 0:  # the line under way belongs to the range before
        f.seek(start - 1)
        skipped, ended = _skip_line(f, end - start + 1)
        position = start - 1 + skipped
        if not ended:  # no line begins in [start, end)
            return
    else:
        f.seek(0)
    while position < end:
        offset = position
        line = f.readline(limit + 2)  # the record, and its CRLF
        if not line:
            return
        position += len(line)
        if len(_record(line)) > limit:
            if not line.endswith(b"\n"):
                position += _skip_line(f)[0]
            yield offset, LongLine(position - offset)
            continue
        yield offset, _record(line)


def stream_lines(f, limit: int, chunk: int = SKIP_CHUNK):
    """Each line of the binary stream f, without its line break (and a CR before it), or LongLine for one longer
    than `limit` bytes: read with f.read(chunk) only (a compressed file's reader has no readline(size)), so no line
    is held longer than `limit` and a 150 MB line is measured in 1 MiB pieces, never read whole."""
    held, long = bytearray(), 0  # the line so far, or the size of one past the limit
    while True:
        data = f.read(chunk)
        if not data:
            break
        start = 0
        while True:
            end = data.find(b"\n", start)
            piece = memoryview(data)[start:len(data) if end < 0 else end]
            if long:
                long += len(piece)
            else:
                held += piece
                if len(held) > limit:
                    long = len(held)
                    held = bytearray()
            if end < 0:
                break
            if long:
                yield LongLine(long + 1)
            else:
                yield bytes(held).removesuffix(b"\r")
            held, long, start = bytearray(), 0, end + 1
    if long:
        yield LongLine(long)
    elif held:
        yield bytes(held).removesuffix(b"\r")


def read_text(path: str, version: tuple = ()) -> str:
    """The file as text. Undecodable bytes become lone surrogates so that only the records holding them fail.
    InputChanged where the file is not `version` (opened_as_planned; empty: not checked)."""
    problem = regular_file_problem(path)
    if problem:  # a FIFO or /dev/zero would never end
        raise InputFileError(f"{path}: {problem}")
    try:
        with opened_as_planned(path, version) as f:
            data = f.read()
    except InputChanged:
        raise
    except Exception as e:  # FileSystems wraps local and remote errors alike
        raise InputFileError(f"{path}: cannot read ({_first_line(e)})") from None
    return data.decode("utf-8-sig", errors="surrogateescape")


def _flatten_deep(text: str, limit: int) -> str:
    """The JSON text with every list or object nested deeper than `limit` replaced by [] (linear in the text).
    Python's parser recurses and fails on deep nesting; after this it cannot, and the record that held the deep
    part is still deeper than any --max_json_depth, so it is rejected as json_too_deep."""
    out, depth, last, skipping = [], 0, 0, False
    for m in _JSON_TOKEN.finditer(text):
        token = m.group()
        if token[0] == '"':
            continue
        if token in "[{":
            depth += 1
            if depth == limit + 1 and not skipping:
                out += [text[last:m.start()], "[]"]
                skipping = True
        else:
            if depth == limit + 1 and skipping:
                last, skipping = m.end(), False
            depth -= 1
    out.append(text[last:])  # unterminated: the parser then says where the text stops
    return "".join(out)


class Fields(dict):
    """A JSON object as parsed, with the first name it gives twice (json.loads keeps the last silently)."""

    repeated: str | None = None


def fields_of(pairs: list) -> dict:
    """json's object_pairs_hook: the object, a Fields saying which name it gives twice where it repeats one (a plain
    dict otherwise: a COCO file's 600,000 annotations stay plain dicts)."""
    fields = dict(pairs)
    if len(fields) != len(pairs):
        fields = Fields(fields)
        fields.repeated = next(name for name, n in Counter(name for name, _ in pairs).items() if n > 1)
    return fields


def repeated_name(value) -> str | None:
    """The name a JSON object parsed with fields_of gives twice, else None."""
    return value.repeated if isinstance(value, Fields) else None


def read_json(path: str, version: tuple = (), names_once: bool = False):
    """The file's JSON value, or InputFileError naming the path, the position and whether it looks truncated.
    `names_once`: an object that gives a name twice is a Fields saying which (repeated_name): a reader must not
    take one of the two silently, as json does (it keeps the last)."""
    text = read_text(path, version)
    hook = {"object_pairs_hook": fields_of} if names_once else {}
    try:
        try:
            return json.loads(text, **hook)
        except RecursionError:
            # Records nested deeper than the parser can go: flattened below every allowed depth (+2 for the list
            # and the object around a record), they are rejected one by one, never the file.
            return json.loads(_flatten_deep(text, JSON_DEPTH_LIMIT + 2), **hook)
    except json.JSONDecodeError as e:
        # An unterminated string or an error at the very end means the input stopped mid-record.
        truncated = e.msg.startswith("Unterminated string") or e.pos >= len(text.rstrip())
        hint = "; the file looks truncated" if truncated else ""
        raise InputFileError(f"{path}: not valid JSON at line {e.lineno} column {e.colno} ({e.msg}){hint}") from None


def nested_repeated_name(value) -> str | None:
    """The first name an object anywhere in value (parsed with fields_of) gives twice, else None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if repeated_name(item) is not None:
            return repeated_name(item)
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def read_json_list(path: str, names_once: bool = False) -> list:
    data = read_json(path, names_once=names_once)
    if not isinstance(data, list):
        raise InputFileError(f"{path}: expected a JSON list of records, found a JSON {type(data).__name__}")
    return data


def deeper_than(value, limit: int) -> bool:
    """Whether lists and objects nest more than `limit` levels in value (a scalar is 0, [] is 1, [[]] is 2)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth + 1 > limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def shallow(value, depth: int):
    """value with what lies below `depth` levels replaced by "...": a deep record made safe to write as JSON."""
    if not isinstance(value, (list, dict)):
        return value
    if depth <= 0:
        return "..."
    if isinstance(value, dict):
        return {k: shallow(v, depth - 1) for k, v in value.items()}
    return [shallow(v, depth - 1) for v in value]


@dataclass(frozen=True)
class InputBounds:
    """Limits on what one input record may hold (the --max_caption_chars, --max_caption_words and
    --max_json_depth flags); past them the record is rejected with the reason."""
    max_caption_chars: int = MAX_CAPTION_CHARS
    max_caption_words: int = MAX_CAPTION_WORDS
    max_json_depth: int = MAX_JSON_DEPTH
    max_record_bytes: int = MAX_RECORD_BYTES

    @classmethod
    def of(cls, opts) -> InputBounds:
        return cls(opts.max_caption_chars, opts.max_caption_words, opts.max_json_depth,
                   getattr(opts, "max_record_bytes", MAX_RECORD_BYTES))

    def too_large(self, size: int, what: str = "the record") -> Reject:
        return Reject("record_too_large", f"{what} has {size:,} bytes, more than --max_record_bytes="
                                          f"{self.max_record_bytes:,}; not read")

    def check_depth(self, raw) -> None:
        if deeper_than(raw, self.max_json_depth):
            raise Reject("json_too_deep", f"lists and objects nest deeper than --max_json_depth={self.max_json_depth}")

    def text(self, value, name: str, empty_reason: str | None = None) -> str:
        """require_text, and at most max_caption_chars characters (field_too_long)."""
        value = require_text(value, name, empty_reason)
        if len(value) > self.max_caption_chars:
            raise Reject("field_too_long", f"{name} has {len(value):,} characters, more than --max_caption_chars="
                                           f"{self.max_caption_chars:,}")
        return value

    def caption(self, value, name: str, empty_reason: str | None = "empty_caption") -> str:
        """require_text, and a caption no longer than the bounds (caption_too_long): nothing downstream (spaCy, the
        eval-set diff) then sees a caption that would crash or stall it."""
        value = require_text(value, name, empty_reason)
        if len(value) > self.max_caption_chars:
            raise Reject("caption_too_long", f"{name} has {len(value):,} characters, more than "
                                             f"--max_caption_chars={self.max_caption_chars:,}")
        words = len(value.split())
        if words > self.max_caption_words:
            raise Reject("caption_too_long", f"{name} has {words:,} words, more than --max_caption_words="
                                             f"{self.max_caption_words:,}")
        return value

    def id(self, value: int, name: str) -> int:
        if value not in INT64:
            raise Reject("id_out_of_range", f"{name} {value} does not fit in 64 bits")
        return value


DEFAULT_BOUNDS = InputBounds()


def require_text(value, name: str, empty_reason: str | None = None) -> str:
    """A non-blank string without undecodable bytes, else Reject: bad_<name>, empty_reason, invalid_utf8."""
    if not isinstance(value, str):
        raise Reject(f"bad_{name}", f"{name} must be a string, got {value!r:.80}")
    if not value.strip():
        raise Reject(empty_reason or f"bad_{name}", f"{name} is empty")
    if has_surrogates(value):
        raise Reject("invalid_utf8", f"{name} has bytes that are not UTF-8")
    return value


def input_sha256(path: str) -> str:
    """The sha256 of an input file, local or remote."""
    problem = regular_file_problem(path)
    if problem:
        raise InputFileError(f"{path}: {problem}")
    try:
        with FileSystems.open(path, compression_type="uncompressed") as f:
            return stream_sha256(f)
    except Exception as e:  # FileSystems wraps local and remote errors alike
        raise InputFileError(f"{path}: cannot read ({_first_line(e)})") from None


_PINNED: dict[str, str] = {}  # path -> sha256, for this launch (run.parse clears it)


def pinned_sha256(path: str) -> str:
    """An input file's sha256 as this launch first read it. A file the workers read whole and check against it (the
    replay file: llm/engines.read_replay) is recorded (made_from), keyed (the LLM cache) and checked by one value."""
    if path not in _PINNED:
        _PINNED[path] = input_sha256(path)
    return _PINNED[path]


def new_launch() -> None:
    _PINNED.clear()


def input_record(files: dict[str, str], opts) -> dict:
    """What a stage's rows were made from, besides hardpos's code: the sha256 of each input file (by the flag that
    names it), the seed and the input bounds. report.json keeps it in each of the stage's table sections
    ("made_from"), and a join (train_set) refuses tables made from other captions or with other options: their
    rows share caption ids, not captions."""
    record = {"sha256": {flag: (pinned_sha256 if flag == "llm_replay" else input_sha256)(path)
                         for flag, path in sorted(files.items())},
              "options": {"seed": opts.seed, **asdict(InputBounds.of(opts))}}
    if getattr(opts, "captions", None):  # a corpus: its files' fingerprint, and the flags that read its records
        from pipeline.sources import corpus

        record["sha256"]["captions"] = corpus.fingerprint(opts)
        record["options"].update({flag: getattr(opts, flag) for flag in ("captions_format", "caption_column",
                                                                         "id_column", "image_column")})
    if getattr(opts, "reference_captions", None):  # the statistics the negatives used (not compared by a join)
        from pipeline.sources import corpus

        record["reference_captions"] = corpus.fingerprint(opts, corpus.reference_files(opts))
    return record


def require_file(path: str) -> None:
    if not FileSystems.exists(path):
        raise InputFileError(f"{path}: no such file")


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def reject_letter(stage: str, table: str, source: str, source_file: str, key: int, skip: Reject, raw,
                  bounds: InputBounds):
    """The rejected dead letter of a record as read; one too deep is written cut to the allowed depth."""
    if skip.reason == "json_too_deep":
        raw = shallow(raw, bounds.max_json_depth)
    return beam.pvalue.TaggedOutput(REJECTED, dead_letter(stage, table, source, source_file, key, skip, raw))


class _ParseFile(beam.DoFn):
    def __init__(self, source: str, normalise, stage: str, table: str, bounds: InputBounds):
        self.source, self.normalise, self.stage, self.table = source, normalise, stage, table
        self.bounds = bounds

    def process(self, entry):
        path, source_file, context = entry
        records = read_json_list(path, names_once=True)
        yield beam.pvalue.TaggedOutput(READ, (source_file, len(records)))
        for index, raw in enumerate(records):
            try:
                self.bounds.check_depth(raw)
                repeated = nested_repeated_name(raw)
                if repeated is not None:  # json keeps the last of the two silently: which one is meant cannot be told
                    raise Reject("repeated_field", f"field {printable(repeated)[:80]!r} appears twice; which one "
                                                   f"holds the record cannot be told")
                yield self.normalise(raw, source_file, index, **context, bounds=self.bounds)
            except Reject as skip:
                yield reject_letter(self.stage, self.table, self.source, source_file, index, skip, raw, self.bounds)


class ReadJsonRecords(beam.PTransform):
    """JSON-list files -> {"records": normalised, "rejected": dead letters, "read": (file, records in file)}.

    `files` holds (path, source_file, context): `normalise(raw, source_file, index, **context, bounds=bounds)`
    returns the record or raises Reject, and the record's key is (source_file, index). A record nested deeper
    than bounds.max_json_depth is rejected before normalise sees it.
    """

    def __init__(self, files: list[tuple[str, str, dict]], source: str, normalise, stage: str, table: str,
                 bounds: InputBounds = DEFAULT_BOUNDS):
        super().__init__()
        self.files, self.source, self.normalise, self.stage, self.table = files, source, normalise, stage, table
        self.bounds = bounds

    def expand(self, pbegin):
        outputs = (
            pbegin
            | "Files" >> beam.Create(self.files)
            | "ParseFiles" >> beam.ParDo(_ParseFile(self.source, self.normalise, self.stage, self.table, self.bounds))
            .with_outputs(REJECTED, READ, main="records")
        )
        # A file is parsed by one worker; spread its records before the per-record work.
        records = outputs.records | "Spread" >> beam.Reshuffle()
        return {"records": records, REJECTED: outputs[REJECTED], READ: outputs[READ]}
