"""Table schemas: one JSON file per released table in schemas/, turned into Arrow schemas and row checks."""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from functools import cache

import pyarrow as pa

from pipeline.resources import resource_dir

_ARROW_TYPES = {
    "string": pa.string(),
    "int64": pa.int64(),
    "int32": pa.int32(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "list<string>": pa.list_(pa.string()),
}
_INT_RANGE = {"int64": 2**63, "int32": 2**31}


class SchemaViolation(ValueError):
    pass


@dataclass(frozen=True)
class TableSchema:
    name: str
    description: str
    split: str | None
    sort_by: tuple[str, ...]
    columns: tuple[dict, ...]
    sha256: str

    @property
    def column_names(self) -> list[str]:
        return [c["name"] for c in self.columns]

    def arrow(self) -> pa.Schema:
        fields = [
            pa.field(c["name"], _ARROW_TYPES[c["type"]], nullable=c["nullable"],
                     metadata={"description": c["description"]})
            for c in self.columns
        ]
        return pa.schema(fields, metadata={"hardpos.table": self.name, "hardpos.schema_sha256": self.sha256})

    def check_row(self, row: dict) -> None:
        """Raise SchemaViolation unless the row has exactly the schema's columns with values of their types."""
        extra = set(row) - set(self.column_names)
        if extra:
            raise SchemaViolation(f"{self.name}: unexpected columns {sorted(extra)}")
        for column in self.columns:
            name, kind = column["name"], column["type"]
            if name not in row:
                raise SchemaViolation(f"{self.name}: missing column {name}")
            value = row[name]
            if value is None:
                if not column["nullable"]:
                    raise SchemaViolation(f"{self.name}: {name} is null")
                continue
            if not _matches(kind, value):
                raise SchemaViolation(f"{self.name}: {name}={value!r} is not {kind}")


def _matches(kind: str, value) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind in _INT_RANGE:
        return isinstance(value, int) and not isinstance(value, bool) and -_INT_RANGE[kind] <= value < _INT_RANGE[kind]
    if kind == "float64":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list<string>":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    raise SchemaViolation(f"unknown column type {kind}")


@cache
def load_schema(name: str) -> TableSchema:
    data = (resource_dir("schemas") / f"{name}.json").read_bytes()
    raw = json.loads(data)
    for column in raw["columns"]:
        if column["type"] not in _ARROW_TYPES:
            raise SchemaViolation(f"schemas/{name}.json: unknown type {column['type']!r}")
    return TableSchema(
        name=raw["name"],
        description=raw["description"],
        split=raw.get("split"),
        sort_by=tuple(raw["sort_by"]),
        columns=tuple(raw["columns"]),
        sha256=hashlib.sha256(data).hexdigest(),
    )
