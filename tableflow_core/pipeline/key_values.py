"""Upsert: a decoded Kafka key's values made to fit the key columns, one record at a time.

A key column's type is the table's (the value's field when the value has it), which may
differ from the key's own type: a string key `"42"` fills a `long` column. A key value
that cannot be converted as declared (`"x9"`, or a number out of the column's range) must
make its record a bad record, routed by the table's `on_error`, not fail the Spark task
that builds the key columns of the whole chunk. So each key row is checked when its key
is decoded; the batch built afterwards from the checked rows cannot fail.

Integers, strings and floating point have fast Python checks (a key is checked for every
record); other types are checked by converting the value alone through Arrow.
"""

from __future__ import annotations

import re
from collections.abc import Callable
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


def _through_arrow(storage: pa.DataType, target: pa.DataType) -> Convert:
    def convert(value: Any) -> Any:
        scalar = pa.scalar(value, type=storage)
        if not storage.equals(target):
            scalar.cast(target)
        return value

    return convert


def _converter(storage: pa.DataType, target: pa.DataType) -> Convert:
    if storage.equals(target):
        if pa.types.is_integer(target):
            return _integer(target)
        if pa.types.is_floating(target):
            return _floating(target)
        if pa.types.is_string(target) or pa.types.is_large_string(target):
            return _string(target)
    return _through_arrow(storage, target)


def key_row_fitter(storage: pa.Schema, target: pa.Schema) -> KeyRowFitter:
    """A function checking one decoded key row (column -> value) against the key columns'
    storage and table types: the row with values converted where needed, or PayloadError
    naming the value and the column."""
    converters = {f.name: (_converter(f.type, target.field(f.name).type), f.type) for f in storage}

    def fit(row: dict[str, Any]) -> dict[str, Any]:
        fitted = {}
        for name, (convert, storage_type) in converters.items():
            value = row[name]
            try:
                fitted[name] = convert(value)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                shown = repr(value)
                shown = shown if len(shown) <= 80 else shown[:77] + "..."
                raise PayloadError(
                    f"key value {shown} does not fit key column {name!r} ({storage_type}): {exc}"
                ) from None
        return fitted

    return fit
