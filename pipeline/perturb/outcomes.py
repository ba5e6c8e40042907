"""Why a record produced no output row: raised by the pure rules, routed to dead letters by the stages."""
from __future__ import annotations


class Skip(Exception):
    """Base class: a record that yields no row, with a stable machine-readable reason."""

    kind = "skipped"

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class Discard(Skip):
    """A well-formed record for which no valid candidate exists (e.g. no meaning-preserving replacement)."""

    kind = "discarded"


class Reject(Skip):
    """A malformed or unparseable record."""

    kind = "rejected"
