"""Plan-time checks of a table's partition, sort and key columns against its schema (pure).

A misspelled column, or a transform the column's type does not allow (`day` of a string),
would otherwise pass `plan` and fail in `apply` after DDL already ran. The schema checked
is the table's write schema: the resolved registry schema plus the columns the table keeps.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

import pyarrow as pa

from tableflow_core.config.project import Table
from tableflow_core.plan.actions import Blocker

TypeCheck = Callable[[pa.DataType], bool]


def _is_primitive(t: pa.DataType) -> bool:
    return not pa.types.is_nested(t)


def _is_temporal(t: pa.DataType) -> bool:
    return pa.types.is_date(t) or pa.types.is_timestamp(t)


def _is_integer(t: pa.DataType) -> bool:
    return pa.types.is_int32(t) or pa.types.is_int64(t)


def _truncatable(t: pa.DataType) -> bool:
    return _is_integer(t) or pa.types.is_decimal(t) or _is_text_or_bytes(t)


def _is_text_or_bytes(t: pa.DataType) -> bool:
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
    )


def _bucketable(t: pa.DataType) -> bool:
    return _truncatable(t) or _is_temporal(t) or pa.types.is_time(t)


# Iceberg's rules: which source types each partition transform accepts.
TRANSFORM_TYPES: dict[str, tuple[TypeCheck, str]] = {
    "identity": (_is_primitive, "a primitive column (not a struct, list or map)"),
    "bucket": (_bucketable, "int, long, decimal, date, time, timestamp, string or binary"),
    "truncate": (_truncatable, "int, long, decimal, string or binary"),
    "year": (_is_temporal, "a date or timestamp"),
    "month": (_is_temporal, "a date or timestamp"),
    "day": (_is_temporal, "a date or timestamp"),
    "hour": (pa.types.is_timestamp, "a timestamp"),
}


def find_column(schema: pa.Schema, path: str) -> pa.Field | str:
    """The field at a dotted path through structs, or why there is none."""
    parts = path.split(".")
    names = schema.names
    fields: pa.Schema | pa.StructType = schema
    found: pa.Field | None = None
    for depth, part in enumerate(parts):
        index = fields.get_field_index(part)
        if index < 0:
            where = ".".join(parts[:depth]) or "the table"
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"; did you mean {'.'.join([*parts[:depth], close[0]])!r}?" if close else ""
            return f"{where} has no column {part!r} (it has {', '.join(names)}){hint}"
        found = fields.field(index)
        if depth < len(parts) - 1:
            if not pa.types.is_struct(found.type):
                kind = "list or map" if pa.types.is_nested(found.type) else str(found.type)
                return f"{'.'.join(parts[: depth + 1])!r} is a {kind}, not a struct"
            fields = found.type
            names = [found.type.field(i).name for i in range(found.type.num_fields)]
    assert found is not None
    return found


def column_blockers(table: Table, schema: pa.Schema) -> list[Blocker]:
    """Blockers for partition, sort and key columns the schema lacks or cannot serve."""
    blockers: list[Blocker] = []

    def block(key: str, message: str) -> None:
        blockers.append(Blocker.at(table, key, "invalid", message))

    for part in table.partition_by:
        found = find_column(schema, part.column)
        if isinstance(found, str):
            block("partition_by", f"partition column {part.column!r}: {found}")
            continue
        accepts, allowed = TRANSFORM_TYPES[part.transform]
        if not accepts(found.type):
            block(
                "partition_by",
                f"partition transform {part.transform} cannot apply to column {part.column!r} "
                f"of type {found.type}: it needs {allowed}",
            )
    for sort in table.sort_by:
        found = find_column(schema, sort.column)
        if isinstance(found, str):
            block("sort_by", f"sort column {sort.column!r}: {found}")
        elif not _is_primitive(found.type):
            block("sort_by", f"sort column {sort.column!r} is a {found.type}, not a primitive")
    for column in table.key_columns:
        found = find_column(schema, column)
        if isinstance(found, str):
            block("key_columns", f"key column {column!r}: {found}")
        elif not _is_primitive(found.type):
            block("key_columns", f"key column {column!r} is a {found.type}, not a primitive")
    return blockers


def problem_blocker(table: Table, problem: str) -> Blocker:
    """A problem found reading the world for `table`; schema problems point at `value:`."""
    key = None
    if problem.startswith("schema:"):
        side_key = any(f"key {what}" in problem for what in ("subject", "schema", "format"))
        key = "key" if side_key else "value"
    return Blocker(
        kind="invalid",
        table=table.name,
        key=key,
        location=str(table.location_of(key) if key else table.source),
        message=problem,
    )
