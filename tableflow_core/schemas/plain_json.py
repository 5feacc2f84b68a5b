"""Plain (schemaless) JSON values: declared `json_columns`, or one `value` text column.

Without declared columns there is nothing to derive a table schema from, so the value
is kept whole as JSON text in a `value` column (queryable with JSON functions, and the
table can switch to declared columns later: added columns are schema evolution).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from tableflow_core.schemas.arrow_values import SchemaMappingError
from tableflow_core.schemas.formats import JsonColumn
from tableflow_core.schemas.json_schema_types import as_json_text

UTC_MICROS = pa.timestamp("us", tz="UTC")

_COLUMN_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": UTC_MICROS,
    "binary": pa.binary(),
    "json": pa.string(),
}
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")

VALUE_COLUMN = "value"


def json_column_type(column: JsonColumn) -> pa.DataType:
    declared = column.type.strip().lower()
    if declared in _COLUMN_TYPES:
        return _COLUMN_TYPES[declared]
    match = _DECIMAL.match(declared)
    if match:
        return pa.decimal128(int(match.group(1)), int(match.group(2)))
    raise SchemaMappingError(
        f"json_columns: column {column.name!r} has unknown type {column.type!r}; "
        f"expected one of {sorted(_COLUMN_TYPES)} or decimal(P,S)"
    )


def json_fields(columns: Sequence[JsonColumn] | None) -> list[pa.Field]:
    if not columns:
        return [pa.field(VALUE_COLUMN, pa.string())]
    return [pa.field(c.name, json_column_type(c)) for c in columns]


def _extract(document: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(document, dict):
            return None
        document = document.get(part)
    return document


def _column_reader(column: JsonColumn) -> Callable[[Any], Any]:
    path = column.json_path
    declared = column.type.strip().lower()
    if declared == "json":
        return lambda doc: as_json_text(_extract(doc, path))
    if declared == "binary":
        return lambda doc: _b64(_extract(doc, path))
    if declared.startswith("decimal") or declared == "string":
        # Decimals travel as text to Arrow; `string` columns accept any scalar as its text.
        return lambda doc: _text(_extract(doc, path))
    return lambda doc: _extract(doc, path)


def _text(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    return as_json_text(value)


def _b64(value: Any) -> Any:
    return None if value is None else base64.b64decode(value, validate=True)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    kinds = {bool: "a boolean", str: "a string", list: "an array", int: "a number"}
    return kinds.get(type(value), "a number")


def plain_json_reader(columns: Sequence[JsonColumn] | None) -> Callable[[bytes], dict[str, Any]]:
    """bytes -> row dict (storage values, temporal/decimal as text)."""
    if not columns:

        def whole(data: bytes) -> dict[str, Any]:
            text = data.decode("utf-8")
            json.loads(text)  # reject what is not JSON
            return {VALUE_COLUMN: text}

        return whole
    readers = [(c.name, _column_reader(c)) for c in columns]

    def declared(data: bytes) -> dict[str, Any]:
        document = json.loads(data)
        if not isinstance(document, dict):
            # Declared columns are read from an object: anything else would land as nulls.
            raise ValueError(f"JSON value is {_json_kind(document)}, not an object")
        return {name: read(document) for name, read in readers}

    return declared


_NO_KEY = object()  # looked up in a JSON object: never one of its keys, so always None
_PLAIN_VALUE_TYPES = frozenset(
    {"int", "long", "float", "double", "boolean", "date", "timestamp", "timestamptz"}
)


def plain_json_values_reader(
    columns: Sequence[JsonColumn], wanted: Sequence[str]
) -> Callable[[bytes], tuple[Any, ...]]:
    """bytes -> the values of the `wanted` columns, in order: what `plain_json_reader`'s
    row holds for them (None for a name not declared), without building the row. A column
    at a top-level key is one C-level lookup for all of them (`map(document.get, keys)`);
    only `string`/decimal columns holding a non-string, and `json`, `binary` or nested
    columns, run Python per value: 5.0 -> 3.5 us a record of 8 columns
    (docs/history/performance-issues-26-31.md)."""
    declared = {c.name: c for c in columns}
    keys: list[object] = []
    texts: list[int] = []  # string and decimal columns: a non-string value becomes its text
    readers: list[tuple[int, Callable[[Any], Any]]] = []  # json, binary, nested paths
    for index, name in enumerate(wanted):
        column = declared.get(name)
        if column is None:
            keys.append(_NO_KEY)
            continue
        kind = column.type.strip().lower()
        path = column.json_path
        simple = kind in _PLAIN_VALUE_TYPES or kind == "string" or kind.startswith("decimal")
        if len(path) == 1 and simple:
            keys.append(path[0])
            if kind not in _PLAIN_VALUE_TYPES:
                texts.append(index)
        else:
            keys.append(_NO_KEY)
            readers.append((index, _column_reader(column)))

    def read(data: bytes) -> tuple[Any, ...]:
        document = json.loads(data)
        if not isinstance(document, dict):
            raise ValueError(f"JSON value is {_json_kind(document)}, not an object")
        values = list(map(document.get, keys))
        for index in texts:
            value = values[index]
            if value is not None and not isinstance(value, str):
                values[index] = as_json_text(value)
        for index, reader in readers:
            values[index] = reader(document)
        return tuple(values)

    return read
