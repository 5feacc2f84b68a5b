"""Iceberg schema -> Delta schema, and the schema changes a name-based reader can follow.

Iceberg Parquet files carry field ids and Iceberg reads by id; Delta (without column
mapping) reads by name. Over the same files this is only equivalent while every
column keeps its name and type for the table's whole history, so:
- added columns are followed (older files lack them: Delta reads null, like Iceberg);
- renamed columns, a dropped column whose name is reused, type promotions, dropped
  columns and types Delta cannot read the Iceberg encoding of are refused with a
  message naming the column (nothing is written).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pyiceberg import types as it
from pyiceberg.schema import Schema as IcebergSchema
from pyiceberg.schema import index_by_id, index_name_by_id

from tableflow_core.delta.errors import DeltaSyncError

# Iceberg types whose Parquet encoding Delta has no type for.
UNSUPPORTED_TYPES: dict[type[it.IcebergType], str] = {
    it.TimeType: "time (Delta has no time type)",
    it.UUIDType: "uuid (stored as fixed[16]; Delta has no uuid type)",
    it.FixedType: "fixed (Delta has no fixed-length binary type)",
    it.TimestampNanoType: "timestamp_ns (Delta timestamps are microseconds)",
    it.TimestamptzNanoType: "timestamptz_ns (Delta timestamps are microseconds)",
    it.UnknownType: "unknown",
    it.GeometryType: "geometry",
    it.GeographyType: "geography",
}


def unsupported_columns(schema: IcebergSchema) -> list[str]:
    """`column: reason` for every column (nested included) Delta cannot read."""
    names = index_name_by_id(schema)
    problems = []
    for field_id, field in sorted(index_by_id(schema).items()):
        reason = UNSUPPORTED_TYPES.get(type(field.field_type))
        if reason is not None:
            problems.append(f"{names[field_id]}: {reason}")
    return problems


def history_problems(history: Iterable[IcebergSchema], current: IcebergSchema) -> list[str]:
    """Changes in the table's schema history a by-name reader would get wrong."""
    current_names = index_name_by_id(current)
    current_ids = {name: field_id for field_id, name in current_names.items()}
    current_fields = index_by_id(current)
    problems: set[str] = set()
    for old in history:
        old_fields = index_by_id(old)
        for field_id, old_name in index_name_by_id(old).items():
            name = current_names.get(field_id)
            if name is not None and name != old_name:
                problems.add(f"column {name!r} was renamed from {old_name!r}")
            elif name is None and current_ids.get(old_name) not in (None, field_id):
                problems.add(f"column {old_name!r} was dropped and added again")
            old_type = old_fields[field_id].field_type
            if (
                name is not None
                and old_type.is_primitive
                and old_type != current_fields[field_id].field_type
            ):
                problems.add(
                    f"column {name!r} changed type from {old_type} to "
                    f"{current_fields[field_id].field_type}"
                )
    return sorted(problems)


def check_mirrorable(history: Iterable[IcebergSchema], current: IcebergSchema) -> None:
    problems = [*unsupported_columns(current), *history_problems(history, current)]
    if problems:
        raise DeltaSyncError(
            "the Iceberg table cannot be read as Delta by column name: "
            + "; ".join(problems)
            + ". Delta reads Parquet columns by name, Iceberg by field id; keep this table "
            "Iceberg-only (remove `delta` from its formats)"
        )


def delta_schema(schema: IcebergSchema) -> Any:
    """The Delta schema (deltalake.Schema) of an Iceberg schema."""
    from deltalake import Schema as DeltaSchema
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return DeltaSchema.from_arrow(schema_to_pyarrow(schema, include_field_ids=False))


def _fields(schema: Any) -> dict[str, dict[str, Any]]:
    return {field["name"]: field for field in json.loads(schema.to_json())["fields"]}


def added_fields(existing: Any, desired: Any) -> list[Any]:
    """Top-level fields of `desired` missing from the Delta table's `existing` schema.

    Anything else that differs (a dropped column, a changed type or nullability, a
    changed struct) cannot be expressed without Delta column mapping: refused.
    """
    from deltalake import Field

    have, want = _fields(existing), _fields(desired)
    dropped = sorted(set(have) - set(want))
    changed = sorted(name for name in set(have) & set(want) if have[name] != want[name])
    if dropped or changed:
        details = [f"column {n!r} was dropped" for n in dropped]
        details += [
            f"column {n!r} changed from {json.dumps(have[n]['type'])} nullable="
            f"{have[n]['nullable']} to {json.dumps(want[n]['type'])} nullable={want[n]['nullable']}"
            for n in changed
        ]
        raise DeltaSyncError(
            "the Delta table's schema cannot follow the Iceberg schema: "
            + "; ".join(details)
            + ". Only new columns are followed; keep this table Iceberg-only"
        )
    new = [want[name] for name in want if name not in have]
    not_nullable = [field["name"] for field in new if not field["nullable"]]
    if not_nullable:
        raise DeltaSyncError(
            f"new required columns {not_nullable} cannot be added to the Delta table "
            "(older files lack them)"
        )
    return [Field.from_json(json.dumps(field)) for field in new]
