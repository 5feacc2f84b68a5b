"""Key types the read tasks group exactly as Spark's window does (pyarrow only: the read
tasks import this, never the transform compiler)."""

from __future__ import annotations

import pyarrow as pa


def dedupable_key_type(data_type: pa.DataType) -> bool:
    """Types whose values the read tasks group exactly as Spark's window does: whole
    numbers, booleans, dates, times, timestamps, text, binary, decimals. Floats are left to
    Spark (it groups -0.0 with 0.0 and every NaN together); nested types too."""
    t = pa.types
    return (
        integer_like(data_type)
        or t.is_string(data_type)
        or t.is_large_string(data_type)
        or t.is_binary(data_type)
        or t.is_large_binary(data_type)
        or t.is_decimal(data_type)
    )


def integer_like(data_type: pa.DataType) -> bool:
    t = pa.types
    if (t.is_time(data_type) or t.is_timestamp(data_type)) and data_type.unit == "ns":
        return False  # Spark keeps microseconds: two values here could be one there
    return (
        t.is_integer(data_type)
        or t.is_boolean(data_type)
        or t.is_date(data_type)
        or t.is_time(data_type)
        or t.is_timestamp(data_type)
    )
