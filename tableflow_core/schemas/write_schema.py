"""The schema a table is written with: the resolved (registry) schema plus the table's own.

A writer schema may drop a field (BACKWARD-compatible in the registry). The table keeps
that column: its data stays readable, new rows hold null there, and it becomes optional.
Spark's Iceberg writer needs every table column in the data it appends, so the decoder's
target and the Spark write schema are the *union* of

- the resolved schema's columns (in its order, with its types, except where the table's
  column is already wider, e.g. a `long` column fed `int` values), and
- the table's columns the resolved schema no longer has, nullable (appended after them,
  also inside nested structs).

`plan` (through `schemas.evolution.diff_schemas`) and `apply` (the decoder target and the
DDL) both use `table_write_schema`, so they agree on what the table becomes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema

# The doc (column comment) of a column the topic's schema no longer has: `plan` shows a
# removed column once ("kept, now optional"), then this mark says it was already kept.
KEPT_COLUMN_DOC = "tableflow: no longer in the topic schema; kept, new rows get null"


def arrow_type_of_table(data_type: pa.DataType) -> pa.DataType:
    """pyiceberg's Arrow type of a table column, in the decoders' conventions.

    pyiceberg answers large_string/large_binary/large_list and `entries` map structs;
    the decoders build string/binary/list<element> and map<key, value> (same Iceberg types).
    """
    if pa.types.is_large_string(data_type):
        return pa.string()
    if pa.types.is_large_binary(data_type):
        return pa.binary()
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        element = data_type.value_field
        return pa.list_(
            pa.field("element", arrow_type_of_table(element.type), nullable=element.nullable)
        )
    if pa.types.is_map(data_type):
        return pa.map_(
            pa.field("key", arrow_type_of_table(data_type.key_type), nullable=False),
            pa.field(
                "value",
                arrow_type_of_table(data_type.item_type),
                nullable=data_type.item_field.nullable,
            ),
        )
    if pa.types.is_struct(data_type):
        return pa.struct([_table_field(data_type.field(i)) for i in range(data_type.num_fields)])
    return data_type


def _table_field(field: pa.Field) -> pa.Field:
    return pa.field(field.name, arrow_type_of_table(field.type), nullable=field.nullable)


def table_arrow_schema(table_schema: Schema) -> pa.Schema:
    """A table's current Iceberg schema as Arrow, without field ids."""
    arrow = schema_to_pyarrow(table_schema, include_field_ids=False)
    return pa.schema([_table_field(f) for f in arrow])


def table_write_schema(resolved: pa.Schema, table_schema: Schema | None) -> pa.Schema:
    """The union of the resolved schema and the table's current schema (see module doc).

    `table_schema` None (a table to create or to replace): the resolved schema itself.
    """
    if table_schema is None:
        return resolved
    current = table_arrow_schema(table_schema)
    fields = _union_fields(list(resolved), list(current))
    return pa.schema(fields, metadata=resolved.metadata)


def write_resolved_schemas(
    resolved: Mapping[str, Any], table_schemas: Mapping[str, Schema | None]
) -> dict[str, Any]:
    """ResolvedSchemas by table name, with `arrow_schema` replaced by the write schema.

    `table_schemas`: each table's current Iceberg schema, None for tables that do not
    exist or are being replaced. The fingerprint (the registry schema's) is kept.
    """
    return {
        name: dataclasses.replace(
            schema, arrow_schema=table_write_schema(schema.arrow_schema, table_schemas.get(name))
        )
        for name, schema in resolved.items()
    }


def _union_fields(desired: list[pa.Field], current: list[pa.Field]) -> list[pa.Field]:
    by_name = {f.name: f for f in current}
    names = {f.name for f in desired}
    merged = [_union_field(f, by_name[f.name]) if f.name in by_name else f for f in desired]
    merged.extend(f.with_nullable(True) for f in current if f.name not in names)
    return merged


def _union_field(desired: pa.Field, current: pa.Field) -> pa.Field:
    return desired.with_type(_union_type(desired.type, current.type))


def _union_type(desired: pa.DataType, current: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(desired) and pa.types.is_struct(current):
        return pa.struct(
            _union_fields(
                [desired.field(i) for i in range(desired.num_fields)],
                [current.field(i) for i in range(current.num_fields)],
            )
        )
    if pa.types.is_list(desired) and pa.types.is_list(current):
        return pa.list_(_union_field(desired.value_field, current.value_field))
    if pa.types.is_map(desired) and pa.types.is_map(current):
        return pa.map_(desired.key_field, _union_field(desired.item_field, current.item_field))
    if _narrower(desired, current):
        return current  # the table's column is wider: values are widened on write
    return desired


def _narrower(desired: pa.DataType, current: pa.DataType) -> bool:
    """`desired` values fit a `current` column that is wider (an in-place widening ago)."""
    if pa.types.is_int32(desired) and pa.types.is_int64(current):
        return True
    if pa.types.is_float32(desired) and pa.types.is_float64(current):
        return True
    return (
        pa.types.is_decimal(desired)
        and pa.types.is_decimal(current)
        and desired.scale == current.scale
        and desired.precision < current.precision
    )
