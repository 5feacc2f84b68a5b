"""Per-format payload decoders: Kafka key/value bytes -> Arrow storage values.

Each decoder keeps its own per-schema-id cache (one decoder per Spark task), so the
registry is asked once per writer schema id per task. A record that cannot be decoded
raises PayloadError (the caller turns it into a DecodeFailure naming the record); a
registry that cannot be reached raises RegistryUnavailable (nothing is skipped then).
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import fastavro
import pyarrow as pa
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from google.protobuf.message import DecodeError as ProtobufDecodeError

from tableflow_core.errors import TableflowError
from tableflow_core.schemas import (
    avro_columns,
    avro_records,
    avro_types,
    connect_json,
    json_schema_types,
    protobuf_types,
)
from tableflow_core.schemas.arrow_values import SchemaMappingError, TemporalAs
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.plain_json import plain_json_reader, plain_json_values_reader
from tableflow_core.schemas.references import fetch_schema, self_contained_text
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.wire_format import (
    HEADER_SIZE,
    FramingError,
    read_header,
    read_protobuf_message_indexes,
)

VALUE_COLUMN = "value"

_T = TypeVar("_T")


class PayloadError(TableflowError):
    """This record's bytes cannot be decoded; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RegistryUnavailable(TableflowError, RuntimeError):
    """The registry could not answer (down, auth, 5xx): retry later, skip nothing."""


TupleReader = Callable[[bytes], tuple[Any, ...]]


class PayloadDecoder(Protocol):
    temporal: TemporalAs

    def decode(self, data: bytes) -> Any:
        """Decoded value: a dict of columns when `as_columns`, else the whole value."""
        ...

    def tuple_reader(self, columns: Sequence[str]) -> TupleReader:
        """`as_columns` decoders: bytes -> the values of `columns` (None where absent)."""
        ...


class _RowsAsTuples:
    """The default `tuple_reader`: the values of the decoded dict."""

    def decode(self, data: bytes) -> Any:
        raise NotImplementedError

    def tuple_reader(self, columns: Sequence[str]) -> TupleReader:
        return _dict_values(self.decode, tuple(columns))


def _dict_values(decode: Callable[[bytes], Any], columns: tuple[str, ...]) -> TupleReader:
    def read(data: bytes) -> tuple[Any, ...]:
        return tuple(map(decode(data).get, columns))

    return read


def _fetch_schema(client: SchemaRegistryClient, schema_id: int, fmt: str | None = None) -> Any:
    try:
        schema = fetch_schema(client, schema_id, fmt)
    except SchemaRegistryError as exc:
        if exc.http_status_code == 404:
            raise PayloadError(f"unknown schema id {schema_id}: {exc.error_message}") from exc
        raise RegistryUnavailable(
            f"schema registry error for schema id {schema_id}: {exc}"
        ) from exc
    except Exception as exc:  # connection errors from the HTTP client
        raise RegistryUnavailable(
            f"schema registry unreachable for schema id {schema_id}: {exc}"
        ) from exc
    if schema is None:  # the mock registry answers None for unknown ids
        raise PayloadError(f"unknown schema id {schema_id}")
    return schema


def _self_contained(client: SchemaRegistryClient, schema: Any, schema_id: int) -> str:
    """The schema's text with its references folded in (`schemas.references`)."""
    return _fetching_references(schema_id, lambda: self_contained_text(schema, client))


def _fetching_references(schema_id: int, call: Callable[[], _T]) -> _T:
    """`call()`, a registry failure while it fetches references raised as RegistryUnavailable
    (an outage, not a bad record)."""
    try:
        return call()
    except SchemaMappingError:
        raise
    except Exception as exc:  # the registry failed while we fetched a reference
        raise RegistryUnavailable(
            f"schema registry error reading the references of schema id {schema_id}: {exc}"
        ) from exc


class _SchemaCache:
    """Schema id -> mapping, remembering ids that are unknown or unmappable."""

    def __init__(self, load: Callable[[int], Any]) -> None:
        self._load = load
        self._entries: dict[int, Any] = {}
        self._errors: dict[int, str] = {}

    def get(self, schema_id: int) -> Any:
        entry = self._entries.get(schema_id)
        if entry is not None:
            return entry
        if schema_id in self._errors:
            raise PayloadError(self._errors[schema_id])
        try:
            entry = self._load(schema_id)
        except PayloadError as exc:
            self._errors[schema_id] = exc.reason
            raise
        except SchemaMappingError as exc:
            reason = f"schema id {schema_id} cannot be mapped: {exc}"
            self._errors[schema_id] = reason
            raise PayloadError(reason) from exc
        self._entries[schema_id] = entry
        return entry


def _framed(data: bytes) -> int:
    try:
        return read_header(data)
    except FramingError as exc:
        raise PayloadError(str(exc)) from exc


class AvroPayloadDecoder(_RowsAsTuples):
    temporal = TemporalAs.INT

    def __init__(
        self, client: SchemaRegistryClient, as_columns: bool, debezium_types: bool = False
    ) -> None:
        self._client = client
        self._as_columns = as_columns
        self._debezium_types = debezium_types
        self._cache = _SchemaCache(self._load)
        # schema id -> (field names, compiled reader) for `decode`; None: not a flat record
        self._records: dict[int, tuple[tuple[str, ...], avro_records.RecordReader] | None] = {}

    def _load(self, schema_id: int) -> avro_types.AvroMapping:
        schema = _fetch_schema(self._client, schema_id)
        if schema.schema_type not in (None, "AVRO"):
            raise PayloadError(f"schema id {schema_id} is {schema.schema_type}, not AVRO")
        return avro_types.map_avro_schema(
            _self_contained(self._client, schema, schema_id), self._debezium_types
        )

    def decode(self, data: bytes) -> Any:
        schema_id = _framed(data)
        mapping: avro_types.AvroMapping = self._cache.get(schema_id)
        if schema_id not in self._records:
            schema = mapping.reader_schema
            names = tuple(f["name"] for f in schema["fields"]) if mapping.is_record else ()
            reader = avro_records.compile_record_reader(mapping, names)
            self._records[schema_id] = None if reader is None else (names, reader)
        compiled = self._records[schema_id]
        if compiled is not None:  # a flat record: the same values fastavro gives, faster
            names, reader = compiled
            return dict(zip(names, _read_compiled(reader, data), strict=True))
        buffer = io.BytesIO(data)
        buffer.seek(HEADER_SIZE)
        try:
            value = fastavro.schemaless_reader(
                buffer,
                mapping.reader_schema,
                None,
                return_record_name=True,
                return_record_name_override=True,
            )
        except (EOFError, StopIteration, ValueError, IndexError, UnicodeDecodeError) as exc:
            raise PayloadError(
                f"corrupt or truncated Avro payload: {type(exc).__name__}: {exc}"
            ) from exc
        trailing = len(data) - buffer.tell()
        if trailing:
            raise PayloadError(
                f"Avro payload has {trailing} unread trailing bytes (wrong schema id?)"
            )
        if mapping.adapter is not None:
            value = mapping.adapter(value)
        if self._as_columns and not mapping.is_record:
            return {VALUE_COLUMN: value}
        return value

    def varint_record(self, data: bytes, column: str) -> str | None:
        """The field's type, "long" or "int", when `data`'s writer schema is a record of
        that one field, named `column`, read as it is written (`schemas/avro_varints.py`);
        else None."""
        try:
            mapping: avro_types.AvroMapping = self._cache.get(_framed(data))
        except PayloadError:
            return None
        schema = mapping.reader_schema
        if not mapping.is_record or mapping.adapter is not None or not isinstance(schema, dict):
            return None
        fields = schema.get("fields") or []
        if len(fields) != 1 or fields[0].get("name") != column:
            return None
        kind = fields[0].get("type")
        if isinstance(kind, dict) and "logicalType" not in kind:
            kind = kind.get("type")
        return kind if kind in ("long", "int") else None

    def tuple_reader(self, columns: Sequence[str]) -> TupleReader:
        """Flat records through a reader compiled per writer schema (`avro_records`), the
        others through fastavro (`decode`)."""
        columns = tuple(columns)
        by_dict = _dict_values(self.decode, columns)
        compiled: dict[int, avro_records.RecordReader | None] = {}
        schemas = self._cache

        def reader_for(data: bytes) -> avro_records.RecordReader | None:
            schema_id = _framed(data)
            if schema_id not in compiled:
                compiled[schema_id] = avro_records.compile_record_reader(
                    schemas.get(schema_id), columns
                )
            return compiled[schema_id]

        # Records come in runs of one schema id: a header equal to the last one's needs no
        # parsing or lookup. b"\xff" is no valid header: the first record goes by fastavro
        # only if it starts with it, and fastavro rejects it as a framing error.
        header, reader = b"\xff", None

        def read(data: bytes) -> tuple[Any, ...]:
            nonlocal header, reader
            if not data.startswith(header):
                reader = reader_for(data)  # raises for bad framing or an unknown schema id
                header = data[:HEADER_SIZE]
            if reader is None:
                return by_dict(data)
            return _read_compiled(reader, data)

        return read

    def columns_reader(
        self, columns: Sequence[str], types: Sequence[pa.DataType]
    ) -> Callable[[Sequence[bytes]], list[pa.Array] | None]:
        """Many flat records of one schema id read at once into the arrays of `columns`
        (of `types`, Arrow storage types) by `avro_columns`; None for payloads it does not
        prove clean, of several schema ids or of one it does not read: those go record by
        record (`tuple_reader`), where a bad one is named."""
        columns, types = tuple(columns), tuple(types)
        readers: dict[bytes, avro_columns.ColumnsReader | None] = {}

        def read(payloads: Sequence[bytes]) -> list[pa.Array] | None:
            if not payloads:
                return None
            frame = payloads[0][:HEADER_SIZE]
            if frame not in readers:
                try:
                    mapping = self._cache.get(_framed(payloads[0]))
                except (PayloadError, RegistryUnavailable):
                    return None  # the record by record path says what is wrong
                readers[frame] = avro_columns.compile_columns_reader(mapping, columns, types)
            reader = readers[frame]
            return None if reader is None else reader(payloads, frame)

        return read


def _read_compiled(reader: avro_records.RecordReader, data: bytes) -> tuple[Any, ...]:
    try:
        return reader(data, HEADER_SIZE)
    except avro_records.TrailingBytes as exc:
        raise PayloadError(
            f"Avro payload has {exc.count} unread trailing bytes (wrong schema id?)"
        ) from exc
    except (EOFError, ValueError, IndexError, struct.error) as exc:
        raise PayloadError(
            f"corrupt or truncated Avro payload: {type(exc).__name__}: {exc}"
        ) from exc


class JsonSchemaPayloadDecoder(_RowsAsTuples):
    temporal = TemporalAs.TEXT

    def __init__(self, client: SchemaRegistryClient, as_columns: bool) -> None:
        self._client = client
        self._as_columns = as_columns
        self._cache = _SchemaCache(self._load)

    def _load(self, schema_id: int) -> json_schema_types.JsonSchemaMapping:
        schema = _fetch_schema(self._client, schema_id)
        if schema.schema_type != "JSON":
            raise PayloadError(f"schema id {schema_id} is {schema.schema_type}, not JSON")
        return json_schema_types.map_json_schema(_self_contained(self._client, schema, schema_id))

    def decode(self, data: bytes) -> Any:
        mapping: json_schema_types.JsonSchemaMapping = self._cache.get(_framed(data))
        try:
            value = json.loads(data[HEADER_SIZE:])
        except (ValueError, UnicodeDecodeError) as exc:
            raise PayloadError(f"invalid JSON payload: {exc}") from exc
        if mapping.adapter is not None:
            value = mapping.adapter(value)
        if self._as_columns and not mapping.is_record:
            return {VALUE_COLUMN: value}
        if self._as_columns and not isinstance(value, dict):
            raise PayloadError(f"JSON payload is a {type(value).__name__}, the schema says object")
        return value


class ProtobufPayloadDecoder(_RowsAsTuples):
    """Decodes each record as the message its Confluent message-index path names.

    `message` (full name): the message type the table holds; a record of another message
    type is a bad record (PayloadError), never a row of nulls. None: any message.
    """

    temporal = TemporalAs.INT

    def __init__(
        self, client: SchemaRegistryClient, as_columns: bool, message: str | None = None
    ) -> None:
        self._client = client
        self._as_columns = as_columns
        self._expected = message
        self._files = _SchemaCache(self._load)
        self._messages: dict[tuple[int, tuple[int, ...]], tuple[Any, protobuf_types.Converter]] = {}
        self._wrong: dict[tuple[int, tuple[int, ...]], str] = {}

    def _load(self, schema_id: int) -> Any:
        schema = _fetch_schema(self._client, schema_id, fmt="serialized")
        if schema.schema_type != "PROTOBUF":
            raise PayloadError(f"schema id {schema_id} is {schema.schema_type}, not PROTOBUF")
        return _fetching_references(
            schema_id, lambda: protobuf_types.file_descriptor_for(schema, self._client)
        )

    def _message(
        self, schema_id: int, indexes: tuple[int, ...]
    ) -> tuple[Any, protobuf_types.Converter]:
        key = (schema_id, indexes)
        found = self._messages.get(key)
        if found is None:
            if key in self._wrong:
                raise PayloadError(self._wrong[key])
            file = self._files.get(schema_id)
            try:
                descriptor = protobuf_types.message_descriptor(file, indexes)
            except SchemaMappingError as exc:
                raise PayloadError(f"schema id {schema_id}: {exc}") from exc
            if self._expected is not None and descriptor.full_name != self._expected:
                reason = (
                    f"record holds Protobuf message {descriptor.full_name!r} (schema id "
                    f"{schema_id}, message indexes {list(indexes)}), the table holds "
                    f"{self._expected!r} messages"
                )
                self._wrong[key] = reason
                raise PayloadError(reason)
            try:
                mapping = protobuf_types.map_message(descriptor)
            except SchemaMappingError as exc:
                raise PayloadError(f"schema id {schema_id}: {exc}") from exc
            found = (protobuf_types.message_class(descriptor), mapping.converter)
            self._messages[key] = found
        return found

    def decode(self, data: bytes) -> Any:
        schema_id = _framed(data)
        try:
            indexes, start = read_protobuf_message_indexes(data, HEADER_SIZE)
        except FramingError as exc:
            raise PayloadError(str(exc)) from exc
        cls, convert = self._message(schema_id, indexes)
        try:
            message = cls.FromString(data[start:])
        except ProtobufDecodeError as exc:
            raise PayloadError(f"corrupt or truncated Protobuf payload: {exc}") from exc
        return convert(message)


class PlainJsonPayloadDecoder(_RowsAsTuples):
    temporal = TemporalAs.TEXT

    def __init__(self, spec: FormatSpec, as_columns: bool) -> None:
        self._read = plain_json_reader(spec.json_columns if as_columns else None)
        self._as_columns = as_columns
        self._columns = spec.json_columns if as_columns else None

    def decode(self, data: bytes) -> Any:
        try:
            row = self._read(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise PayloadError(f"invalid JSON: {exc}") from exc
        return row if self._as_columns else row[VALUE_COLUMN]

    def tuple_reader(self, columns: Sequence[str]) -> TupleReader:
        if not self._columns:
            return super().tuple_reader(columns)
        read_values = plain_json_values_reader(self._columns, columns)

        def read(data: bytes) -> tuple[Any, ...]:
            try:
                return read_values(data)
            except (ValueError, UnicodeDecodeError) as exc:
                raise PayloadError(f"invalid JSON: {exc}") from exc

        return read


class ConnectJsonPayloadDecoder(_RowsAsTuples):
    """Kafka Connect JSON with embedded schemas (`schemas/connect_json.py`). `table`: the
    table's data columns (name -> type) each record's schema must fit."""

    temporal = TemporalAs.INT

    def __init__(
        self, spec: FormatSpec, as_columns: bool, table: Mapping[str, Any] | None = None
    ) -> None:
        self._reader = connect_json.ConnectJsonReader(
            as_columns, envelope=spec.envelope == "debezium", table=table
        )

    def decode(self, data: bytes) -> Any:
        try:
            return self._reader.read(data)
        except connect_json.BadRecord as exc:
            raise PayloadError(str(exc)) from None


class StringPayloadDecoder(_RowsAsTuples):
    temporal = TemporalAs.INT

    def __init__(self, as_columns: bool) -> None:
        self._as_columns = as_columns

    def decode(self, data: bytes) -> Any:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PayloadError(f"not UTF-8 text: {exc}") from exc
        return {VALUE_COLUMN: text} if self._as_columns else text


class BytesPayloadDecoder(_RowsAsTuples):
    temporal = TemporalAs.INT

    def __init__(self, as_columns: bool) -> None:
        self._as_columns = as_columns

    def decode(self, data: bytes) -> Any:
        return {VALUE_COLUMN: data} if self._as_columns else data


def payload_decoder(
    spec: FormatSpec,
    registry: RegistrySettings | None,
    as_columns: bool,
    message: str | None = None,
    table: Mapping[str, Any] | None = None,
) -> PayloadDecoder:
    """The decoder for one side (value: `as_columns=True`; key: the whole value).

    `message`: Protobuf only, the full name of the message the side's records must hold.
    `table`: `connect_json` values only, the table's data columns (name -> Arrow type)
    each record's embedded schema must fit.
    """
    if spec.uses_registry:
        if registry is None:
            raise ValueError(f"format {spec.format!r} needs a schema registry, none is configured")
        client = registry.client()
        if spec.format == "avro":
            return AvroPayloadDecoder(client, as_columns, spec.envelope == "debezium")
        if spec.format == "json_schema":
            return JsonSchemaPayloadDecoder(client, as_columns)
        return ProtobufPayloadDecoder(client, as_columns, message)
    if spec.format == "json":
        return PlainJsonPayloadDecoder(spec, as_columns)
    if spec.format == "connect_json":
        return ConnectJsonPayloadDecoder(spec, as_columns, table)
    if spec.format == "string":
        return StringPayloadDecoder(as_columns)
    return BytesPayloadDecoder(as_columns)
