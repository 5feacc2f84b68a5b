"""Kafka Connect's JsonConverter with embedded schemas (`format: connect_json`).

With `schemas.enable=true` each key and value is `{"schema": {...}, "payload": ...}`: the
Connect schema (`type` int8..int64, float (FLOAT32), double (FLOAT64), boolean, string,
bytes, array, map, struct; `optional`; a logical `name` and its `parameters`) and the
value as JSON. No registry: `plan` learns the table's schema from the topic's latest
records (`kafka/latest_records.py`), and each record is checked against the table it
lands in.

Types map as the Avro path maps the same Connect schema (docs/cdc.md, "How source types
land"): Debezium's temporal names (`io.debezium.time.*`) and Connect's logical types
(`org.apache.kafka.connect.data.Decimal/Date/Time/Timestamp`) as their Avro logical
types; Decimal's precision comes from its `connect.decimal.precision` parameter (64, kept
as exact text, when absent, as Confluent's AvroConverter does); `VariableScaleDecimal` is
the struct {scale, value} it is; `Json`, `Uuid`, `ZonedTimestamp`... are strings. Bytes
and Decimals travel as base64 text (the converter's default `decimal.format=BASE64`).

Values become Arrow storage values (`arrow_values.TemporalAs.INT`): dates as days,
timestamps as micros, times as micros of the day (a long), decimals as `Decimal`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import MAX_PREC, Context, Decimal
from typing import Any

import pyarrow as pa

from tableflow_core.errors import TableflowError
from tableflow_core.schemas.arrow_values import SchemaMappingError
from tableflow_core.schemas.formats import DECLARED_NOT_NULL

UTC_MICROS = pa.timestamp("us", tz="UTC")
LOCAL_MICROS = pa.timestamp("us")
MAX_ICEBERG_DECIMAL_PRECISION = 38
# Confluent's AvroConverter gives a Decimal without `connect.decimal.precision` this
# precision; above 38 digits the column keeps the exact value as text.
DEFAULT_DECIMAL_PRECISION = 64
DECIMAL = "org.apache.kafka.connect.data.Decimal"
# Decimal arithmetic rounds to 28 digits by default: an unscaled value is scaled exactly.
_EXACT = Context(prec=MAX_PREC)
VALUE_COLUMN = "value"

Convert = Callable[[Any], Any]

_PRIMITIVES: dict[str, pa.DataType] = {
    "int8": pa.int32(),
    "int16": pa.int32(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float": pa.float32(),  # Connect's FLOAT32 (JsonConverter writes the type's name)
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "bytes": pa.binary(),
}


def _times(factor: int) -> Convert:
    return lambda v: v * factor


def _nanos_to_micros(value: Any) -> Any:
    return value // 1000


# Logical name -> (Arrow type, storage conversion of the JSON value; None = as is).
_LOGICAL: dict[str, tuple[pa.DataType, Convert | None]] = {
    "io.debezium.time.Date": (pa.date32(), None),
    "io.debezium.time.Time": (pa.int64(), _times(1000)),
    "io.debezium.time.MicroTime": (pa.int64(), None),
    "io.debezium.time.NanoTime": (pa.int64(), _nanos_to_micros),
    "io.debezium.time.Timestamp": (LOCAL_MICROS, _times(1000)),
    "io.debezium.time.MicroTimestamp": (LOCAL_MICROS, None),
    "io.debezium.time.NanoTimestamp": (LOCAL_MICROS, _nanos_to_micros),
    "org.apache.kafka.connect.data.Date": (pa.date32(), None),
    "org.apache.kafka.connect.data.Time": (pa.int64(), _times(1000)),
    "org.apache.kafka.connect.data.Timestamp": (UTC_MICROS, _times(1000)),
}
# Logical names whose base type a logical name above must have.
_LOGICAL_BASES: dict[str, frozenset[str]] = {
    "io.debezium.time.Date": frozenset({"int32"}),
    "io.debezium.time.Time": frozenset({"int32"}),
    "io.debezium.time.MicroTime": frozenset({"int64"}),
    "io.debezium.time.NanoTime": frozenset({"int64"}),
    "io.debezium.time.Timestamp": frozenset({"int64"}),
    "io.debezium.time.MicroTimestamp": frozenset({"int64"}),
    "io.debezium.time.NanoTimestamp": frozenset({"int64"}),
    "org.apache.kafka.connect.data.Date": frozenset({"int32"}),
    "org.apache.kafka.connect.data.Time": frozenset({"int32"}),
    "org.apache.kafka.connect.data.Timestamp": frozenset({"int64"}),
}


@dataclass(frozen=True)
class ConnectMapping:
    """A Connect schema's Arrow type and the storage conversion of its JSON values."""

    arrow_type: pa.DataType
    convert: Convert | None  # None: the JSON value is the storage value
    optional: bool


def map_connect_schema(schema: Any, path: str = "value") -> ConnectMapping:
    """The Arrow type of a Connect schema (as JsonConverter embeds it) and how its JSON
    values become storage values; SchemaMappingError when it has no faithful mapping."""
    if not isinstance(schema, dict) or not isinstance(schema.get("type"), str):
        raise SchemaMappingError(f"{path}: not a Connect schema (no 'type'): {schema!r:.200}")
    kind = schema["type"]
    name = schema.get("name")
    optional = bool(schema.get("optional", False))
    convert: Convert | None
    if name == DECIMAL and kind == "bytes":
        arrow_type, convert = _decimal(schema, path)
    elif name in _LOGICAL and kind in _LOGICAL_BASES[name]:
        arrow_type, convert = _LOGICAL[name]
    elif kind in _PRIMITIVES:
        arrow_type = _PRIMITIVES[kind]
        convert = _base64 if kind == "bytes" else None
    elif kind == "struct":
        arrow_type, convert = _struct(schema, path)
    elif kind == "array":
        item = map_connect_schema(schema.get("items"), f"{path}[]")
        arrow_type = pa.list_(pa.field("element", item.arrow_type))
        convert = _list(item.convert)
    elif kind == "map":
        keys = map_connect_schema(schema.get("keys"), f"{path}.key")
        values = map_connect_schema(schema.get("values"), f"{path}.value")
        arrow_type = pa.map_(pa.field("key", keys.arrow_type, nullable=False), values.arrow_type)
        convert = _map(keys.convert, values.convert)
    else:
        raise SchemaMappingError(f"{path}: Connect type {kind!r} has no table type")
    return ConnectMapping(arrow_type, None if convert is None else _nullable(convert), optional)


def _nullable(convert: Convert) -> Convert:
    return lambda v: None if v is None else convert(v)


def _base64(value: Any) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, TypeError, ValueError) as exc:
        raise ValueError(f"bytes {value!r:.60} are not base64 text: {exc}") from None


def _decimal(schema: dict[str, Any], path: str) -> tuple[pa.DataType, Convert]:
    parameters = schema.get("parameters") or {}
    try:
        scale = int(parameters.get("scale", 0))
        precision = int(parameters.get("connect.decimal.precision", DEFAULT_DECIMAL_PRECISION))
    except (TypeError, ValueError):
        raise SchemaMappingError(f"{path}: Decimal parameters {parameters!r}") from None

    def read(value: Any) -> Decimal:
        if isinstance(value, str):
            unscaled = int.from_bytes(_base64(value), "big", signed=True)
            return Decimal(unscaled).scaleb(-scale, _EXACT)
        raise ValueError(
            f"Decimal {value!r:.60} is not base64 text (set the converter's "
            "decimal.format=BASE64, its default)"
        )

    if precision > MAX_ICEBERG_DECIMAL_PRECISION:
        return pa.string(), lambda v: str(read(v))
    if scale > precision or scale < 0:
        raise SchemaMappingError(f"{path}: decimal scale {scale}, precision {precision}")
    return pa.decimal128(precision, scale), read


def _struct(schema: dict[str, Any], path: str) -> tuple[pa.DataType, Convert | None]:
    fields: list[pa.Field] = []
    converts: list[tuple[str, Convert]] = []
    for entry in schema.get("fields") or []:
        name = entry.get("field") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            raise SchemaMappingError(f"{path}: a struct field without a name: {entry!r:.200}")
        mapped = map_connect_schema(entry, f"{path}.{name}")
        fields.append(
            pa.field(
                name,
                mapped.arrow_type,
                metadata=None if mapped.optional else DECLARED_NOT_NULL,
            )
        )
        if mapped.convert is not None:
            converts.append((name, mapped.convert))
    if not converts:
        return pa.struct(fields), None

    def convert(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"a struct's value is a {type(value).__name__}, not an object")
        row = dict(value)
        for name, read in converts:
            row[name] = read(row.get(name))
        return row

    return pa.struct(fields), convert


def _list(item: Convert | None) -> Convert | None:
    if item is None:
        return None
    return lambda values: [item(v) for v in values]


def _map(key: Convert | None, value: Convert | None) -> Convert:
    """A map is a JSON object when its keys are strings, else an array of [key, value]."""
    read_key = key or (lambda k: k)
    read_value = value or (lambda v: v)

    def convert(entries: Any) -> Any:
        pairs = entries.items() if isinstance(entries, dict) else entries
        return [(read_key(k), read_value(v)) for k, v in pairs]

    return convert


# ---------------------------------------------------------------------------- records


class NotConnectJson(TableflowError, ValueError):
    """The bytes are not `{"schema": ..., "payload": ...}`."""


_PAYLOAD = b',"payload":'
_SCHEMA = b'{"schema":'


def split(data: bytes) -> tuple[bytes, Any, Any]:
    """One JsonConverter record -> (its schema's text, its schema, its payload).

    JsonConverter writes `{"schema":<schema>,"payload":<payload>}` in this order: the
    first `,"payload":` outside a string ends the schema (a string holds `"` escaped, and
    a schema has no member named payload, which the parse of the schema's text checks).
    Other layouts (whitespace, another member order) are parsed whole."""
    at = data.find(_PAYLOAD)
    if data.startswith(_SCHEMA) and at > 0 and data.endswith(b"}"):
        text = data[len(_SCHEMA) : at]
        try:
            return text, json.loads(text), json.loads(data[at + len(_PAYLOAD) : -1])
        except ValueError:
            pass  # not that layout after all: the whole document says what it is
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise NotConnectJson(f"invalid JSON: {exc}") from None
    if not isinstance(document, dict) or "schema" not in document or "payload" not in document:
        kind = type(document).__name__
        members = sorted(document) if isinstance(document, dict) else kind
        raise NotConnectJson(
            f"not Kafka Connect JSON with an embedded schema ({{schema, payload}}; found "
            f"{members}): the converter needs schemas.enable=true"
        )
    schema = document["schema"]
    return json.dumps(schema, sort_keys=True).encode("utf-8"), schema, document["payload"]


def envelope_after(schema: Any) -> Any:
    """The Connect schema of a Debezium envelope's `after` (else `before`) image."""
    fields = schema.get("fields") if isinstance(schema, dict) else None
    by_name = {f.get("field"): f for f in fields or [] if isinstance(f, dict)}
    missing = [n for n in ("after", "op", "source") if n not in by_name]
    if missing:
        raise SchemaMappingError(
            f"the embedded schema has no field(s) {missing}: not a Debezium change event "
            f"envelope (fields {sorted(str(n) for n in by_name)})"
        )
    return by_name["after"]


def record_fields(arrow_type: pa.DataType) -> list[pa.Field]:
    """The columns a value of `arrow_type` lands as: a struct's fields, else `value`."""
    if pa.types.is_struct(arrow_type):
        return [arrow_type.field(i) for i in range(arrow_type.num_fields)]
    return [pa.field(VALUE_COLUMN, arrow_type)]


# Widenings a record's field may have against the table's column (the table's type is
# the wider one): the schema-evolution rules (docs/type-mapping.md, "Schema changes").
def _fits(record: pa.DataType, table: pa.DataType) -> bool:
    if record.equals(table):
        return True
    if pa.types.is_integer(record) and pa.types.is_integer(table):
        return bool(record.bit_width <= table.bit_width)
    if pa.types.is_float32(record) and pa.types.is_float64(table):
        return True
    if pa.types.is_decimal(record) and pa.types.is_decimal(table):
        return bool(record.scale == table.scale and record.precision <= table.precision)
    return False


def mismatch(fields: Sequence[pa.Field], table: Mapping[str, pa.DataType]) -> str | None:
    """Why a record whose image has `fields` does not fit the table's `table` columns
    (name -> type), None when it does: each field is a column of the same type (or a
    narrower one the column was widened from); columns the record lacks are null."""
    for field in fields:
        column = table.get(field.name)
        if column is None:
            return (
                f"its embedded schema has field {field.name!r} ({field.type}), which the table "
                "lacks: run `tableflow plan`/`apply` to evolve the table"
            )
        if not _fits(field.type, column):
            return (
                f"its embedded schema gives field {field.name!r} type {field.type}, the "
                f"table's column is {column}: run `tableflow plan`/`apply` to evolve the table"
            )
    return None


class BadRecord(TableflowError, ValueError):
    """This record cannot be read as its embedded schema says, or does not fit the table."""


class ConnectJsonReader:
    """A JsonConverter key or value -> storage values, per its embedded schema.

    `envelope`: values are Debezium change events: the result is the event with its
    `before`/`after` images converted. `table`: the table's data columns (name -> type): a
    change event whose `after` schema does not fit them is a bad record (BadRecord), never
    a row with columns dropped. Schemas are compiled once per distinct schema text.
    """

    def __init__(
        self,
        as_columns: bool,
        envelope: bool = False,
        table: Mapping[str, pa.DataType] | None = None,
    ) -> None:
        self._as_columns = as_columns
        self._envelope = envelope
        self._table = table
        self._compiled: dict[bytes, Callable[[Any], Any] | str] = {}

    def _compile(self, schema: Any) -> Callable[[Any], Any] | str:
        try:
            if self._envelope:
                return self._compile_envelope(schema)
            mapped = map_connect_schema(schema)
        except SchemaMappingError as exc:
            return f"embedded schema: {exc}"
        if self._table is not None:
            reason = mismatch(record_fields(mapped.arrow_type), self._table)
            if reason is not None:
                return reason
        convert = mapped.convert or (lambda v: v)
        if self._as_columns and not pa.types.is_struct(mapped.arrow_type):
            return lambda v: {VALUE_COLUMN: convert(v)}
        return convert

    def _compile_envelope(self, schema: Any) -> Callable[[Any], Any] | str:
        mapped = map_connect_schema(envelope_after(schema), "after")
        struct = mapped.arrow_type
        if not pa.types.is_struct(struct):
            raise SchemaMappingError(f"'after' is {struct}, not a struct")
        if self._table is not None:
            reason = mismatch(record_fields(struct), self._table)
            if reason is not None:
                return reason
        image = mapped.convert

        def read(event: Any) -> Any:
            if not isinstance(event, dict):
                raise ValueError(f"a change event is an object, not {type(event).__name__}")
            if image is None:
                return event
            converted = dict(event)
            converted["after"] = image(event.get("after"))
            converted["before"] = image(event.get("before"))
            return converted

        return read

    def read(self, data: bytes) -> Any:
        # The converter's layout with a schema seen before: only the payload is parsed (a
        # schema text that parsed once is a whole object, so the split was right).
        at = data.find(_PAYLOAD)
        if at > 0 and data.startswith(_SCHEMA) and data.endswith(b"}"):
            compiled = self._compiled.get(data[len(_SCHEMA) : at])
            if compiled is not None:
                try:
                    payload = json.loads(data[at + len(_PAYLOAD) : -1])
                except (ValueError, UnicodeDecodeError):
                    pass  # split() below says what is wrong
                else:
                    return self._apply(compiled, payload)
        try:
            text, schema, payload = split(data)
        except NotConnectJson as exc:
            raise BadRecord(str(exc)) from None
        compiled = self._compiled.get(text)
        if compiled is None:
            compiled = self._compiled[text] = self._compile(schema)
        return self._apply(compiled, payload)

    @staticmethod
    def _apply(compiled: Callable[[Any], Any] | str, payload: Any) -> Any:
        if isinstance(compiled, str):
            raise BadRecord(compiled)
        if payload is None:
            return None
        try:
            return compiled(payload)
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            raise BadRecord(f"payload does not match its embedded schema: {exc}") from None
