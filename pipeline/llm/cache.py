"""Result cache for LLM generations under --cache_dir: one JSON line per prompt, keyed by (model, prompt
template sha256, chat format, sampling parameters, caption).

Files are written whole per generated batch (temporary name, then rename), so a run killed midway leaves only
complete files; the next run reads them and sends only the prompts with no result. A key may appear in several
files (a retried bundle, or more attempts added later): best_entry picks one deterministically.
"""
from __future__ import annotations

import hashlib
import json
import math
import uuid

# One folder per table (hard_positives, llm_negatives): a stage reads only its own answers.
DEFAULT_TABLE = "hard_positives"


def cache_key(model: str, prompt_sha256: str, chat_format: str, sampling: dict, caption: str) -> str:
    text = json.dumps([model, prompt_sha256, chat_format, sampling, caption], sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_pattern(cache_dir: str, table: str = DEFAULT_TABLE) -> str:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.join(cache_dir, table, "*.jsonl")


def write_entries(cache_dir: str, entries: list[dict], table: str = DEFAULT_TABLE) -> str:
    """Write entries as one file, atomically; returns its path."""
    from apache_beam.io.filesystems import FileSystems

    digest = hashlib.sha256("\n".join(sorted(e["key"] for e in entries)).encode()).hexdigest()[:24]
    final = FileSystems.join(cache_dir, table, f"{digest}-{uuid.uuid4().hex[:8]}.jsonl")
    temp = final + ".tmp"
    directory = FileSystems.join(cache_dir, table)
    if not FileSystems.exists(directory):
        try:
            FileSystems.mkdirs(directory)
        except OSError:  # made meanwhile by another worker
            pass
    with FileSystems.create(temp) as f:
        f.write("".join(json.dumps(e, sort_keys=True, ensure_ascii=True) + "\n" for e in entries).encode("utf-8"))
    FileSystems.rename([temp], [final])
    return final


MAX_LINE_BYTES = 64 << 20  # an entry holds a few attempts of at most --llm_max_reply_bytes each


def lines(data: bytes) -> list[str]:
    """The lines of a cache file; one that is not UTF-8 (a damaged file) comes back empty, a miss like any other
    damaged line."""
    out = []
    for raw in data.splitlines():
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            out.append("")
    return out


def file_lines(readable):
    """The lines of a matched cache file (fileio.ReadableFile), streamed: a line past MAX_LINE_BYTES is measured in
    pieces, never held, and comes back empty (a miss, as any damaged line); a local path that is not a regular file
    (a FIFO would block the open forever, a device never end) has no lines."""
    from pipeline.sources.files import LongLine, regular_file_problem, stream_lines

    if regular_file_problem(readable.metadata.path):
        return
    with readable.open(compression_type="uncompressed") as f:
        for raw in stream_lines(f, MAX_LINE_BYTES):
            if not isinstance(raw, LongLine):
                yield from lines(raw)


def parse_line(line: str) -> tuple[str, dict] | None:
    """(key, entry) of a cache line, or None for a damaged line: a cache miss, never an error."""
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return (entry["key"], entry) if valid_entry(entry) else None


def _is_int(value) -> bool:  # one the tables' int64 columns hold
    return isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < 1 << 63


def _is_count(value) -> bool:  # one the tables' int32 columns hold (output_tokens, max_new_tokens), never below 0
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31


def _is_number(value) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _is_text(value) -> bool:
    """Text Beam's coders and the tables can hold: no lone surrogate (a JSON \\ud800 escape)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def valid_entry(entry) -> bool:
    """An entry of the shape write_entries writes (generate.answer_batch): a key, at least one attempt, each with its
    text and a finish reason other than an error, its sampling and token count of the right types, and `accepted`
    None or one of the attempts, numbers the tables' columns hold (token counts int32 and not negative, a seed
    int64, floats finite), text with no lone surrogate. Any other
    line is damaged: a line that parses but has no attempts, an attempt with no finish reason, a seed of 2^70 or a
    \\ud800 in a caption would otherwise be taken for an answer, or stop the run in a traceback."""
    if not isinstance(entry, dict) or not isinstance(entry.get("key"), str) or not _is_text(entry):
        return False
    attempts = entry.get("attempts")
    if not isinstance(attempts, list) or not attempts:
        return False
    for attempt in attempts:
        if not isinstance(attempt, dict) or not isinstance(attempt.get("text"), str) \
                or not isinstance(attempt.get("finish_reason"), str) or attempt["finish_reason"] == "error":
            return False
        if "output_tokens" in attempt and not _is_count(attempt["output_tokens"]):
            return False
        sampling = attempt.get("sampling", {})
        if not isinstance(sampling, dict) or not all(
                check(sampling[name]) for name, check in (("max_new_tokens", _is_count), ("temperature", _is_number),
                                                          ("top_p", _is_number)) if name in sampling) \
                or not (sampling.get("seed") is None or _is_int(sampling["seed"])):
            return False
    accepted = entry.get("accepted")
    return accepted is None or (_is_int(accepted) and 0 <= accepted < len(attempts))


def best_entry(entries: list[dict]) -> dict | None:
    """The entry with the most attempts; ties broken by content, so the choice never depends on file order."""
    if not entries:
        return None
    return max(entries, key=lambda e: (len(e.get("attempts", [])), json.dumps(e, sort_keys=True)))
