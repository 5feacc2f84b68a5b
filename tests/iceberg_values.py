"""Comparing rows read by different engines, value by value, guided by the Iceberg schema.

Each reader hands back its own Python shapes: pyiceberg (Arrow) gives structs as dicts and
maps as lists of pairs; the Trino client gives structs as named tuples and maps as dicts;
a float column comes back as the float32 value (Arrow) or as its shortest decimal text
parsed into a double (Trino's JSON). `canonical(value, iceberg_type)` maps both onto one
form so that `==` means "the same value", never "close enough".
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
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
    # By the first column (an id in most tables); rows that share it (a dead-letter
    # table's topic) in one order whatever order the reader returned them in.
    return sorted(result, key=lambda r: (r[0], repr(r)))


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


# A sample table of every type tableflow writes, for cross-engine tests.
UTC = dt.UTC
SAMPLE_ARROW_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("flag", pa.bool_()),
        pa.field("i32", pa.int32()),
        pa.field("f32", pa.float32()),
        pa.field("f64", pa.float64()),
        pa.field("dec", pa.decimal128(18, 4)),
        pa.field("dec38", pa.decimal128(38, 10)),
        pa.field("name", pa.string()),
        pa.field("ts_tz", pa.timestamp("us", tz="UTC")),
        pa.field("ts", pa.timestamp("us")),
        pa.field("d", pa.date32()),
        pa.field("t", pa.time64("us")),
        pa.field("bin", pa.binary()),
        pa.field("fx", pa.binary(4)),
        pa.field("st", pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string())])),
        pa.field("lst", pa.list_(pa.string())),
        pa.field("mp", pa.map_(pa.string(), pa.int64())),
    ]
)
# What Trino 476 calls each column of SAMPLE_ARROW_SCHEMA (the Iceberg -> Trino type mapping).
SAMPLE_TRINO_TYPES = [
    "bigint",
    "boolean",
    "integer",
    "real",
    "double",
    "decimal(18, 4)",
    "decimal(38, 10)",
    "varchar",
    "timestamp(6) with time zone",
    "timestamp(6)",
    "date",
    "time(6)",
    "varbinary",
    "varbinary",
    "row(a integer, b varchar)",
    "array(varchar)",
    "map(varchar, bigint)",
]
# The same columns as Spark SQL expressions over `id` (no TIME and no fixed in Spark).
SAMPLE_SPARK_COLUMNS = """id, id % 2 = 0 AS flag, CAST(id * 7 AS INT) AS i32,
 CAST(id / 4 AS FLOAT) AS f32, id / 3 AS f64, CAST(id / 7 AS DECIMAL(18,4)) AS dec,
 CAST(CAST(id AS DECIMAL(38,10)) * 1000000000000 + 0.0123456789 AS DECIMAL(38,10)) AS dec38,
 concat('n', id, 'é') AS name, timestamp_micros(1704067200000000 + id * 1000001) AS ts_tz,
 CAST(timestamp_micros(1706749323000000 + id) AS TIMESTAMP_NTZ) AS ts,
 date_add(DATE '1969-12-25', CAST(id AS INT)) AS d, CAST(concat('b', id) AS BINARY) AS bin,
 named_struct('a', CAST(id AS INT), 'b', concat('s', id)) AS st,
 IF(id % 10 = 3, NULL, array(concat('x', id), NULL)) AS lst,
 IF(id % 10 = 4, map_filter(map('k', id), (k, v) -> false), map('k', id, 'z', -id)) AS mp"""


def sample_row(i: int) -> dict[str, Any]:
    """Row `i` of the sample table: edge values of every type; every 25th row all nulls."""
    if i % 25 == 0:  # every nullable column null
        return {"id": i, **{f.name: None for f in SAMPLE_ARROW_SCHEMA if f.name != "id"}}
    return {
        "id": i,
        "flag": i % 2 == 0,
        "i32": -(i * 7) if i % 3 else 2**31 - 1,
        "f32": i / 3,
        "f64": i / 7 if i % 11 else -0.0,
        "dec": decimal.Decimal(i * 10001).scaleb(-4).quantize(decimal.Decimal("0.0001")),
        "dec38": decimal.Decimal(f"{'-' if i % 2 else ''}{i}1234567890123456.0123456789"),
        "name": f"n{i}é\u4e2d" if i % 7 else "",
        # Before 1970, across a leap second day, at the microsecond.
        "ts_tz": dt.datetime(1969 + i % 60, 6, 30, 23, 59, 59, i, tzinfo=UTC),
        "ts": dt.datetime(2024, 2, 29, 1, 2, 3, 999999 - i),
        "d": dt.date(1900, 1, 1) + dt.timedelta(days=i * 997),
        "t": dt.time(23, 59, 59, i) if i % 2 else dt.time(0, 0, 0),
        "bin": bytes([i % 256, 0, 255]) if i % 5 else b"",
        "fx": i.to_bytes(4, "big"),
        "st": {"a": i, "b": None if i % 4 == 0 else f"s{i}"},
        "lst": [f"x{i}", None] if i % 3 else [],
        "mp": [("k", i), ("z", -i)] if i % 6 else [],
    }
