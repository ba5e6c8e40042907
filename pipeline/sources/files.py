"""Reading source annotation files: file-level problems are fatal with one clear line, record-level ones are not."""
from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.io.dead_letters import REJECTED, dead_letter
from pipeline.perturb.outcomes import Reject
from pipeline.perturb.text import has_surrogates

READ = "read"


class InputFileError(Exception):
    """A missing, unreadable or malformed input file. The message is one line naming the path."""


def read_text(path: str) -> str:
    """The file as text. Undecodable bytes become lone surrogates so that only the records holding them fail."""
    try:
        with FileSystems.open(path, compression_type="uncompressed") as f:
            data = f.read()
    except Exception as e:  # FileSystems wraps local and remote errors alike
        raise InputFileError(f"{path}: cannot read ({_first_line(e)})") from None
    return data.decode("utf-8-sig", errors="surrogateescape")


def read_json(path: str):
    """The file's JSON value, or InputFileError naming the path, the position and whether it looks truncated."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        # An unterminated string or an error at the very end means the input stopped mid-record.
        truncated = e.msg.startswith("Unterminated string") or e.pos >= len(text.rstrip())
        hint = "; the file looks truncated" if truncated else ""
        raise InputFileError(f"{path}: not valid JSON at line {e.lineno} column {e.colno} ({e.msg}){hint}") from None


def read_json_list(path: str) -> list:
    data = read_json(path)
    if not isinstance(data, list):
        raise InputFileError(f"{path}: expected a JSON list of records, found a JSON {type(data).__name__}")
    return data


def require_text(value, name: str, empty_reason: str | None = None) -> str:
    """A non-blank string without undecodable bytes, else Reject: bad_<name>, empty_reason, invalid_utf8."""
    if not isinstance(value, str):
        raise Reject(f"bad_{name}", f"{name} must be a string, got {value!r:.80}")
    if not value.strip():
        raise Reject(empty_reason or f"bad_{name}", f"{name} is empty")
    if has_surrogates(value):
        raise Reject("invalid_utf8", f"{name} has bytes that are not UTF-8")
    return value


def require_file(path: str) -> None:
    if not FileSystems.exists(path):
        raise InputFileError(f"{path}: no such file")


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


class _ParseFile(beam.DoFn):
    def __init__(self, source: str, normalise, stage: str, table: str):
        self.source, self.normalise, self.stage, self.table = source, normalise, stage, table

    def process(self, entry):
        path, source_file, context = entry
        records = read_json_list(path)
        yield beam.pvalue.TaggedOutput(READ, (source_file, len(records)))
        for index, raw in enumerate(records):
            try:
                yield self.normalise(raw, source_file, index, **context)
            except Reject as skip:
                yield beam.pvalue.TaggedOutput(
                    REJECTED, dead_letter(self.stage, self.table, self.source, source_file, index, skip, raw))


class ReadJsonRecords(beam.PTransform):
    """JSON-list files -> {"records": normalised, "rejected": dead letters, "read": (file, records in file)}.

    `files` holds (path, source_file, context): `normalise(raw, source_file, index, **context)` returns the
    record or raises Reject, and the record's key is (source_file, index).
    """

    def __init__(self, files: list[tuple[str, str, dict]], source: str, normalise, stage: str, table: str):
        super().__init__()
        self.files, self.source, self.normalise, self.stage, self.table = files, source, normalise, stage, table

    def expand(self, pbegin):
        outputs = (
            pbegin
            | "Files" >> beam.Create(self.files)
            | "ParseFiles" >> beam.ParDo(_ParseFile(self.source, self.normalise, self.stage, self.table))
            .with_outputs(REJECTED, READ, main="records")
        )
        # A file is parsed by one worker; spread its records before the per-record work.
        records = outputs.records | "Spread" >> beam.Reshuffle()
        return {"records": records, REJECTED: outputs[REJECTED], READ: outputs[READ]}
