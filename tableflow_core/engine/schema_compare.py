"""Comparing the table's columns with the desired Arrow schema.

Uses DECODING's `diff_schemas` (nested, full rules) when it is installed; until then
a top-level-only comparison with the same result shape keeps apply working.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

_WIDENINGS = {
    (pa.int32(), pa.int64()): "int -> long",
    (pa.float32(), pa.float64()): "float -> double",
}


@dataclass(frozen=True)
class Change:
    kind: Literal["add_column", "widen_type", "make_optional"]
    path: str
    detail: str = ""


@dataclass(frozen=True)
class Diff:
    changes: tuple[Change, ...]
    incompatible: tuple[str, ...]


def top_level_diff(current: pa.Schema, desired: pa.Schema) -> Diff:
    changes: list[Change] = []
    incompatible: list[str] = []
    for field in desired:
        index = current.get_field_index(field.name)
        if index < 0:
            if field.nullable:
                changes.append(Change("add_column", field.name, str(field.type)))
            else:
                incompatible.append(f"new column {field.name!r} is required (not optional)")
            continue
        existing = current.field(index)
        if existing.type != field.type:
            widening = _WIDENINGS.get((existing.type, field.type))
            if widening is None:
                incompatible.append(f"column {field.name!r}: {existing.type} -> {field.type}")
            else:
                changes.append(Change("widen_type", field.name, widening))
        if not existing.nullable and field.nullable:
            changes.append(Change("make_optional", field.name))
    return Diff(tuple(changes), tuple(incompatible))


def diff_table_schema(current: pa.Schema, desired: pa.Schema) -> Any:
    """Changes that make the table (`current`, as Spark shows it) take `desired`.

    Columns `desired` lacks are not reported: a Spark schema carries no column docs, so
    whether they were already kept is unknown here (`plan` reports them, from the catalog).
    """
    try:
        from tableflow_core.schemas.evolution import SchemaDiff, diff_schemas, iceberg_schema_for
    except ImportError:
        return top_level_diff(current, desired)
    diff = diff_schemas(iceberg_schema_for(current), desired)
    kept = ("keep_column", "restore_column")
    return SchemaDiff(tuple(c for c in diff.changes if c.kind not in kept), diff.incompatible)
