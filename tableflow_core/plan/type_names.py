"""Iceberg's names for column types (`decimal(10, 2)`, `timestamptz`, `list<string>`).

The plan shows what the table will hold, so it speaks Iceberg, not Arrow
(`decimal128(10, 2)`, `timestamp[us, tz=UTC]`, `list<item: string>`).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa


def _timestamp(t: pa.TimestampType) -> str:
    name = "timestamptz" if t.tz is not None else "timestamp"
    return f"{name}_ns" if t.unit == "ns" else name


def _list(t: pa.ListType) -> str:
    return f"list<{iceberg_type_name(t.value_type)}>"


def _struct(t: pa.StructType) -> str:
    fields = ", ".join(f"{f.name}: {iceberg_type_name(f.type)}" for f in t)
    return f"struct<{fields}>"


def _map(t: pa.MapType) -> str:
    return f"map<{iceberg_type_name(t.key_type)}, {iceberg_type_name(t.item_type)}>"


# First matching predicate wins (order matters only where predicates overlap).
NAMES: tuple[tuple[Callable[[pa.DataType], bool], Callable[..., str]], ...] = (
    (pa.types.is_boolean, lambda t: "boolean"),
    (lambda t: t in (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16()), lambda t: "int"),
    (lambda t: t in (pa.int64(), pa.uint32()), lambda t: "long"),
    (lambda t: t in (pa.float16(), pa.float32()), lambda t: "float"),
    (pa.types.is_float64, lambda t: "double"),
    (pa.types.is_decimal, lambda t: f"decimal({t.precision}, {t.scale})"),
    (pa.types.is_date, lambda t: "date"),
    (pa.types.is_time, lambda t: "time"),
    (pa.types.is_timestamp, _timestamp),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), lambda t: "string"),
    (lambda t: isinstance(t, pa.UuidType), lambda t: "uuid"),
    (pa.types.is_fixed_size_binary, lambda t: f"fixed[{t.byte_width}]"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), lambda t: "binary"),
    (lambda t: pa.types.is_list(t) or pa.types.is_large_list(t), _list),
    (pa.types.is_map, _map),
    (pa.types.is_struct, _struct),
)


def iceberg_type_name(arrow_type: pa.DataType) -> str:
    """The Iceberg type a column of `arrow_type` is stored as; Arrow's own name if none fits."""
    for matches, name in NAMES:
        if matches(arrow_type):
            return name(arrow_type)
    return str(arrow_type)
