"""Upsert: a decoded Kafka key's values made to fit the key columns, one record at a time.

A key column's type is the table's (the value's field when the value has it), which may
differ from the key's own type: a string key `"42"` fills a `long` column. A key value
that cannot be converted as declared (`"x9"`, or a number out of the column's range) must
make its record a bad record, routed by the table's `on_error`, not fail the Spark task
that builds the key columns of the whole chunk. So each key row is checked when its key
is decoded; the batch built afterwards from the checked rows cannot fail.

Integers (also temporal values stored as integers), strings, bytes, floating point,
decimals and booleans have fast Python checks (a key is checked for every record); text
to be parsed into a temporal or decimal column is checked by converting it through Arrow.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from decimal import Decimal
from typing import Any

import pyarrow as pa

from tableflow_core.schemas.payloads import PayloadError

Convert = Callable[[Any], Any]
KeyRowFitter = Callable[[dict[str, Any]], dict[str, Any]]

_INTEGER = re.compile(r"[+-]?[0-9]+")


def _integer(data_type: pa.DataType) -> Convert:
    bits = data_type.bit_width
    low, high = (0, 2**bits - 1) if pa.types.is_unsigned_integer(data_type) else (
        -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    )  # fmt: skip

    def convert(value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and _INTEGER.fullmatch(value):
            number = int(value)
        else:
            raise TypeError(f"not an integer ({type(value).__name__})")
        if not low <= number <= high:
            raise OverflowError(f"out of the column's range {low}..{high}")
        return number

    return convert


def _floating(data_type: pa.DataType) -> Convert:
    def convert(value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            return float(value)  # ValueError when it is not a number
        raise TypeError(f"not a number ({type(value).__name__})")

    return convert


def _string(data_type: pa.DataType) -> Convert:
    def convert(value: Any) -> Any:
        if isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        raise TypeError(f"not text ({type(value).__name__})")

    return convert


def _binary(data_type: pa.DataType) -> Convert:
    def convert(value: Any) -> Any:
        if isinstance(value, bytes | bytearray | memoryview):
            return value
        raise TypeError(f"not bytes ({type(value).__name__})")

    return convert


def _decimal(data_type: pa.DataType) -> Convert:
    scale, whole = data_type.scale, data_type.precision - data_type.scale

    def convert(value: Any) -> Any:
        if isinstance(value, str):
            value = Decimal(value)  # InvalidOperation (an ArithmeticError) if not a number
        if isinstance(value, int) and not isinstance(value, bool):
            value = Decimal(value)
        if not isinstance(value, Decimal) or not value.is_finite():
            raise TypeError(f"not a decimal ({type(value).__name__})")
        digits, exponent = value.as_tuple()[1:]
        assert isinstance(exponent, int)
        if -exponent > scale or len(digits) + exponent > whole:
            raise OverflowError(f"{value} does not fit {data_type}")
        return value

    return convert


def _boolean(data_type: pa.DataType) -> Convert:
    def convert(value: Any) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise TypeError(f"not a boolean ({type(value).__name__})")

    return convert


def _through_arrow(storage: pa.DataType, target: pa.DataType) -> Convert:
    def convert(value: Any) -> Any:
        scalar = pa.scalar(value, type=storage)
        if not storage.equals(target):
            scalar.cast(target)
        return value

    return convert


_FAST: tuple[tuple[Callable[[pa.DataType], bool], Callable[[pa.DataType], Convert]], ...] = (
    (pa.types.is_integer, _integer),
    (pa.types.is_floating, _floating),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), _string),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), _binary),
    (pa.types.is_decimal, _decimal),
    (pa.types.is_boolean, _boolean),
)


def _converter(storage: pa.DataType, target: pa.DataType) -> Convert:
    # Integer storage (timestamps as micros, dates as days) always casts to its target;
    # text storage of a temporal or decimal target (JSON keys) is parsed through Arrow.
    if storage.equals(target) or pa.types.is_integer(storage):
        for matches, converter in _FAST:
            if matches(storage):
                return converter(storage)
    return _through_arrow(storage, target)


def key_row_fitter(
    storage: pa.Schema, target: pa.Schema, masked: Collection[str] = ()
) -> KeyRowFitter:
    """A function checking one decoded key row (column -> value) against the key columns'
    storage and table types: the row with values converted where needed, or PayloadError
    naming the value and the column (never the value of a `masked` column)."""
    converters = {f.name: (_converter(f.type, target.field(f.name).type), f.type) for f in storage}

    def fit(row: dict[str, Any]) -> dict[str, Any]:
        fitted = {}
        for name, (convert, storage_type) in converters.items():
            value = row[name]
            try:
                fitted[name] = convert(value)
            except (pa.ArrowException, TypeError, ValueError, ArithmeticError) as exc:
                if name in masked:
                    raise PayloadError(
                        f"key value (a {type(value).__name__}; masked column, not shown) does "
                        f"not fit key column {name!r} ({storage_type})"
                    ) from None
                shown = repr(value)
                shown = shown if len(shown) <= 80 else shown[:77] + "..."
                raise PayloadError(
                    f"key value {shown} does not fit key column {name!r} ({storage_type}): {exc}"
                ) from None
        return fitted

    return fit
