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
        "record": json.dumps(raw, ensure_ascii=True, sort_keys=True, default=repr),
    }
