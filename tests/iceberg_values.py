"""Comparing rows read by different engines, value by value, guided by the Iceberg schema.

Each reader hands back its own Python shapes: pyiceberg (Arrow) gives structs as dicts and
maps as lists of pairs; the Trino client gives structs as named tuples and maps as dicts;
a float column comes back as the float32 value (Arrow) or as its shortest decimal text
parsed into a double (Trino's JSON). `canonical(value, iceberg_type)` maps both onto one
form so that `==` means "the same value", never "close enough".
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Iterable, Sequence
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    FloatType,
    IcebergType,
    ListType,
    MapType,
    StructType,
    TimestamptzType,
)


def canonical(value: Any, field_type: IcebergType) -> Any:
    if value is None:
        return None
    if isinstance(field_type, StructType):
        names = [f.name for f in field_type.fields]
        # A dict (Arrow) or a tuple in field order (Trino's NamedRowTuple).
        items = [value.get(n) for n in names] if isinstance(value, dict) else list(value)
        return tuple(
            canonical(v, f.field_type) for v, f in zip(items, field_type.fields, strict=True)
        )
    if isinstance(field_type, ListType):
        return [canonical(v, field_type.element_type) for v in value]
    if isinstance(field_type, MapType):
        pairs = value.items() if isinstance(value, dict) else value
        return sorted(
            (canonical(k, field_type.key_type), canonical(v, field_type.value_type))
            for k, v in pairs
        )
    if isinstance(field_type, FloatType):
        return struct.unpack("<f", struct.pack("<f", value))[0]
    if isinstance(field_type, DecimalType):
        return str(value)  # the digits and the scale: Decimal("1.0") == Decimal("1.00")
    if isinstance(field_type, TimestamptzType):
        assert value.tzinfo is not None, f"timestamptz read without a zone: {value!r}"
        return value.astimezone(dt.UTC)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def canonical_rows(
    rows: Iterable[Sequence[Any] | dict[str, Any]], schema: Schema
) -> list[tuple[Any, ...]]:
    fields = schema.fields
    result = []
    for row in rows:
        values = [row.get(f.name) for f in fields] if isinstance(row, dict) else list(row)
        assert len(values) == len(fields), (values, fields)
        result.append(
            tuple(canonical(v, f.field_type) for v, f in zip(values, fields, strict=True))
        )
    return sorted(result, key=lambda r: r[0])


def first_difference(
    left: list[tuple[Any, ...]], right: list[tuple[Any, ...]], schema: Schema
) -> str | None:
    """A readable description of the first row/column where two readers differ."""
    if len(left) != len(right):
        return f"{len(left)} rows against {len(right)}"
    for a, b in zip(left, right, strict=True):
        for field, x, y in zip(schema.fields, a, b, strict=True):
            if x != y or type(x) is not type(y):
                return f"id {a[0]} column {field.name} ({field.field_type}): {x!r} != {y!r}"
    return None
