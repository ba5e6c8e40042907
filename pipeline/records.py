"""Stable identities of records: the same input gives the same ids on any worker, in any order."""
from __future__ import annotations

import hashlib

# What every caption table's row carries of its caption record: its ids (caption_id and image_id for COCO, the
# corpus's own key for any corpus), its image (file_name or image_url), the file it came from, the caption.
CAPTION_FIELDS = ("example_id", "caption_id", "image_id", "key", "file_name", "image_url", "source_file", "caption")


def record_key(source_file: str, source_index: int) -> str:
    """Where a record came from: its file (relative to the source root) and its position in that file."""
    return f"{source_file}:{source_index}"


def example_id(source: str, key: str) -> str:
    """Hash of (source, record key): 16 hex digits, stable across runs, machines and shardings."""
    return hashlib.sha256(f"{source}\x1f{key}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def identity(source: str, source_file: str, index: int) -> dict:
    """The provenance columns every normalised record starts with."""
    key = record_key(source_file, index)
    return {"example_id": example_id(source, key), "source": source, "source_file": source_file,
            "source_index": index}
