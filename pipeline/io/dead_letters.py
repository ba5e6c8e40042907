"""Dead letters: one row per input record that produced no output row, with the reason."""
from __future__ import annotations

import json

from pipeline.perturb.outcomes import Skip
from pipeline.perturb.text import printable
from pipeline.records import record_key

REJECTED = "rejected"
DISCARDED = "discarded"
SCHEMA = "dead_letters"


def dead_letter(stage: str, table: str, source: str, source_file: str, source_index: int,
                skip: Skip, raw) -> dict:
    """The dead-letter row for `raw`, the record as read (any JSON value) or as normalised."""
    return {
        "stage": stage,
        "table": table,
        "source": source,
        "source_file": source_file,
        "source_index": source_index,
        "record_key": record_key(source_file, source_index),
        "kind": skip.kind,
        "reason": skip.reason,
        "detail": printable(skip.detail),
        # ensure_ascii keeps undecodable bytes (lone surrogates) as \udcXX escapes: always valid UTF-8.
        "record": json.dumps(kept_of(raw), ensure_ascii=True, sort_keys=True, default=repr),
    }


# What a dead letter keeps of its record: enough to see what was wrong, never the record whatever its size (a
# rejected 500 MB line was written whole). Strings past MAX_STRING characters, and everything past about
# RECORD_BUDGET characters, are cut with a note of their length; short strings (a type, a key) and every field's
# name are kept.
MAX_STRING = 4_096
SHORT_STRING = 64
RECORD_BUDGET = 65_536
MAX_ITEMS = 1_000
MAX_DEPTH = 200


def kept_of(raw):
    return _cut(raw, [RECORD_BUDGET], 0)


def _cut_text(text: str, budget: list[int]) -> str:
    keep = max(0, min(MAX_STRING, budget[0]))
    if len(text) > keep and len(text) > SHORT_STRING:
        text = f"{text[:keep]}... ({len(text):,} characters)"
    budget[0] -= len(text)
    return text


def _cut(value, budget: list[int], depth: int):
    if isinstance(value, str):
        return _cut_text(value, budget)
    if isinstance(value, (bytes, bytearray)):
        return f"({len(value):,} bytes)"
    if isinstance(value, (list, tuple, dict)) and depth >= MAX_DEPTH:
        return "..."
    if isinstance(value, dict):
        items = list(value.items())
        out = {str(k) if len(str(k)) <= SHORT_STRING else _cut_text(str(k), budget): _cut(v, budget, depth + 1)
               for k, v in items[:MAX_ITEMS]}
        if len(items) > MAX_ITEMS:
            out["..."] = f"{len(items) - MAX_ITEMS:,} more fields"
        return out
    if isinstance(value, (list, tuple)):
        out = []
        for item in value:
            if len(out) == MAX_ITEMS or budget[0] <= 0:
                out.append(f"... {len(value) - len(out):,} more items")
                break
            out.append(_cut(item, budget, depth + 1))
        return out
    return value
