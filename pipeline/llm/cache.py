"""Result cache for LLM generations under --cache_dir: one JSON line per prompt, keyed by (model, prompt
template sha256, chat format, sampling parameters, caption).

Files are written whole per generated batch (temporary name, then rename), so a run killed midway leaves only
complete files; the next run reads them and sends only the prompts with no result. A key may appear in several
files (a retried bundle, or more attempts added later): best_entry picks one deterministically.
"""
from __future__ import annotations

import hashlib
import json
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


def parse_line(line: str) -> tuple[str, dict] | None:
    try:
        entry = json.loads(line)
        return entry["key"], entry
    except (ValueError, KeyError, TypeError, RecursionError):
        return None  # a damaged line is a cache miss, never an error


def best_entry(entries: list[dict]) -> dict | None:
    """The entry with the most attempts; ties broken by content, so the choice never depends on file order."""
    if not entries:
        return None
    return max(entries, key=lambda e: (len(e.get("attempts", [])), json.dumps(e, sort_keys=True)))
