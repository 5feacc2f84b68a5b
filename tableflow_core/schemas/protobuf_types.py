"""Protobuf descriptor -> Arrow type mapping, message -> Arrow storage values.

The registry hands out Protobuf schemas as base64 `FileDescriptorProto`s when asked with
`format=serialized` (confluent-kafka's own deserializer does the same), so no protoc and
no .proto text parser are needed: we reuse confluent-kafka's pool set-up (well-known types,
google.type, confluent meta) and its resolution of schema references.
"""

from __future__ import annotations

import base64
import binascii
import decimal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.common.protobuf import _init_pool, _is_builtin
from google.protobuf import descriptor_pb2, json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import Message

from tableflow_core.schemas.arrow_values import SchemaMappingError
from tableflow_core.schemas.expansion import ExpansionBudget, check_expansion
from tableflow_core.schemas.references import SERIALIZED, referenced_schemas

Converter = Callable[[Any], Any]

UTC_MICROS = pa.timestamp("us", tz="UTC")

_F = FieldDescriptor
_SCALARS: dict[int, pa.DataType] = {
    _F.TYPE_DOUBLE: pa.float64(),
    _F.TYPE_FLOAT: pa.float32(),
    _F.TYPE_INT32: pa.int32(),
    _F.TYPE_SINT32: pa.int32(),
    _F.TYPE_SFIXED32: pa.int32(),
    _F.TYPE_INT64: pa.int64(),
    _F.TYPE_SINT64: pa.int64(),
    _F.TYPE_SFIXED64: pa.int64(),
    _F.TYPE_UINT32: pa.int64(),  # Iceberg has no unsigned types
    _F.TYPE_FIXED32: pa.int64(),
    _F.TYPE_UINT64: pa.decimal128(20, 0),  # lossless for the full uint64 range
    _F.TYPE_FIXED64: pa.decimal128(20, 0),
    _F.TYPE_BOOL: pa.bool_(),
    _F.TYPE_STRING: pa.string(),
    _F.TYPE_BYTES: pa.binary(),
}
_UNSIGNED_64 = {_F.TYPE_UINT64, _F.TYPE_FIXED64}

_WRAPPERS: dict[str, pa.DataType] = {
    "google.protobuf.DoubleValue": pa.float64(),
    "google.protobuf.FloatValue": pa.float32(),
    "google.protobuf.Int64Value": pa.int64(),
    "google.protobuf.UInt64Value": pa.decimal128(20, 0),
    "google.protobuf.Int32Value": pa.int32(),
    "google.protobuf.UInt32Value": pa.int64(),
    "google.protobuf.BoolValue": pa.bool_(),
    "google.protobuf.StringValue": pa.string(),
    "google.protobuf.BytesValue": pa.binary(),
}
_JSON_TEXT = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}


@dataclass(frozen=True)
class ProtobufMapping:
    arrow_type: pa.StructType
    converter: Converter  # parsed message -> dict of Arrow storage values


def file_descriptor_for(schema: Schema, client: SchemaRegistryClient) -> FileDescriptor:
    """Build the FileDescriptor of a registry schema fetched with `fmt="serialized"`."""
    proto = _descriptor_proto(schema.schema_str or "")
    pool = DescriptorPool()
    _init_pool(pool)
    # The imported files (schema references), each once, dependencies first; fetched
    # through `references.fetch_version` (Apicurio's `format=serialized` fallback).
    # google/protobuf/..., confluent/...: in the pool already (`_init_pool`).
    for referenced in referenced_schemas(schema, client, SERIALIZED, skip=_is_builtin):
        imported = _descriptor_proto(referenced.schema.schema_str or "")
        imported.name = referenced.name
        if not _in_pool(pool, imported.name):
            pool.Add(imported)
    proto.name = "default"
    return _add(pool, proto)


def _descriptor_proto(text: str) -> descriptor_pb2.FileDescriptorProto:
    try:
        serialized = base64.b64decode(text.encode("ascii"), validate=True)
        return descriptor_pb2.FileDescriptorProto.FromString(serialized)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise SchemaMappingError(
            "the registry returned Protobuf schema text instead of a serialized descriptor; "
            "tableflow needs a registry that answers `format=serialized` for Protobuf "
            f"schemas, or returns the registered descriptor without it: {exc}"
        ) from exc


def _in_pool(pool: DescriptorPool, name: str) -> bool:
    try:
        pool.FindFileByName(name)
    except KeyError:
        return False
    return True


def _add(pool: DescriptorPool, proto: descriptor_pb2.FileDescriptorProto) -> FileDescriptor:
    pool.Add(proto)
    return pool.FindFileByName(proto.name)


def message_descriptor(file: FileDescriptor, indexes: Sequence[int]) -> Descriptor:
    """The message a Confluent message-index path points at (e.g. [0] = first message)."""
    candidates = list(file.message_types_by_name.values())
    descriptor: Descriptor | None = None
    for index in indexes:
        if index < 0 or index >= len(candidates):
            raise SchemaMappingError(f"message index path {list(indexes)} is out of range")
        descriptor = candidates[index]
        candidates = list(descriptor.nested_types)
    if descriptor is None:
        raise SchemaMappingError("empty message index path")
    return descriptor


def message_by_name(file: FileDescriptor, name: str | None) -> Descriptor:
    """The table's message: by (fully-qualified or simple) name, or the file's only one.

    Records name their message by its index path in the subject's own file (Confluent wire
    format), so the message must be declared there (top level or nested), not in an import.
    Without a name, a schema with several top-level messages is ambiguous: the first one
    is often a helper type, and guessing it silently turned records into rows of nulls.
    """
    messages = list(file.message_types_by_name.values())
    if not messages:
        raise SchemaMappingError("the Protobuf schema declares no message")
    if name is None:
        if len(messages) == 1:
            return messages[0]
        listed = ", ".join(m.full_name for m in messages)
        raise SchemaMappingError(
            f"the Protobuf schema declares {len(messages)} top-level messages ({listed}); "
            "set `message:` in the table's value (or key) format to the one the topic's "
            "records hold"
        )
    found = _find_message(file, name)
    if found.file is not file:
        raise SchemaMappingError(
            f"message {found.full_name!r} is declared in the imported file {found.file.name!r}, "
            "not in the subject's schema: records can only hold the subject's own messages"
        )
    return found


def _find_message(file: FileDescriptor, name: str) -> Descriptor:
    package = file.package
    for candidate in (name, f"{package}.{name}" if package else name):
        try:
            return file.pool.FindMessageTypeByName(candidate)
        except KeyError:
            continue
    declared = ", ".join(m.full_name for m in file.message_types_by_name.values())
    raise SchemaMappingError(
        f"message {name!r} not found in the Protobuf schema (it declares {declared})"
    )


def message_index_path(descriptor: Descriptor) -> tuple[int, ...]:
    """The Confluent message-index path of a message of its file (e.g. (1, 0))."""
    path: list[int] = []
    current: Descriptor | None = descriptor
    while current is not None:
        parent = current.containing_type
        siblings = (
            list(parent.nested_types)
            if parent is not None
            else list(current.file.message_types_by_name.values())
        )
        path.append([s.full_name for s in siblings].index(current.full_name))
        current = parent
    return tuple(reversed(path))


def message_class(descriptor: Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(descriptor)


def map_message(descriptor: Descriptor) -> ProtobufMapping:
    """The message's columns. A message type used in several fields is expanded at each
    use: the budget stops a walk that would produce too many columns or levels."""
    arrow_type, converter = _message(descriptor, path="", in_progress=(), budget=ExpansionBudget())
    assert isinstance(arrow_type, pa.StructType)
    check_expansion(arrow_type)  # the walk counted columns; this checks column depth
    return ProtobufMapping(arrow_type, converter)


def _message(
    descriptor: Descriptor, path: str, in_progress: tuple[str, ...], budget: ExpansionBudget
) -> tuple[pa.DataType, Converter]:
    budget.level(len(in_progress) + 1, path)
    if descriptor.full_name in in_progress:
        raise SchemaMappingError(
            f"recursive Protobuf message {descriptor.full_name!r} at {path or '<root>'}: "
            "Iceberg tables cannot hold recursive types"
        )
    in_progress = (*in_progress, descriptor.full_name)
    fields: list[pa.Field] = []
    readers: list[tuple[str, Callable[[Message], Any]]] = []
    for field in descriptor.fields:
        field_path = f"{path}.{field.name}" if path else field.name
        budget.column(field_path)
        field_type, read = _field(field, field_path, in_progress, budget)
        fields.append(pa.field(field.name, field_type, nullable=True))
        readers.append((field.name, read))

    def convert(message: Message) -> dict[str, Any]:
        return {name: read(message) for name, read in readers}

    return pa.struct(fields), convert


def _field(
    field: FieldDescriptor, path: str, in_progress: tuple[str, ...], budget: ExpansionBudget
) -> tuple[pa.DataType, Callable[[Message], Any]]:
    name = field.name
    if _is_map(field):
        entry = field.message_type
        budget.column(f"{path}{{key}}")
        budget.column(f"{path}{{}}")
        key_type, key_conv = _value(entry.fields_by_name["key"], path, in_progress, budget)
        value_type, value_conv = _value(
            entry.fields_by_name["value"], f"{path}{{}}", in_progress, budget
        )
        map_type = pa.map_(pa.field("key", key_type, nullable=False), pa.field("value", value_type))
        return map_type, lambda m: [
            (key_conv(k), value_conv(v)) for k, v in getattr(m, name).items()
        ]
    if _is_repeated(field):
        budget.column(f"{path}[]")
    value_type, conv = _value(field, path, in_progress, budget)
    if _is_repeated(field):
        return pa.list_(pa.field("element", value_type)), lambda m: [
            conv(v) for v in getattr(m, name)
        ]
    if field.type == _F.TYPE_MESSAGE or field.has_presence:
        # Unset messages, oneof members and proto3 `optional` fields are null.
        return value_type, lambda m: conv(getattr(m, name)) if m.HasField(name) else None
    return value_type, lambda m: conv(getattr(m, name))


def _is_repeated(field: FieldDescriptor) -> bool:
    if hasattr(field, "is_repeated"):  # protobuf >= 6 dropped `label`
        return bool(field.is_repeated)
    return bool(field.label == _F.LABEL_REPEATED)


def _is_map(field: FieldDescriptor) -> bool:
    return (
        _is_repeated(field)
        and field.type == _F.TYPE_MESSAGE
        and field.message_type.GetOptions().map_entry
    )


def _identity(value: Any) -> Any:
    return value


def _value(
    field: FieldDescriptor, path: str, in_progress: tuple[str, ...], budget: ExpansionBudget
) -> tuple[pa.DataType, Converter]:
    """Type and converter of one (non-repeated) value of `field`."""
    if field.type == _F.TYPE_ENUM:
        enum_type = field.enum_type

        def enum_name(number: int) -> str:
            value = enum_type.values_by_number.get(number)
            return value.name if value is not None else str(number)

        return pa.string(), enum_name
    if field.type in _UNSIGNED_64:
        return _SCALARS[field.type], decimal.Decimal
    if field.type in _SCALARS:
        return _SCALARS[field.type], _identity
    if field.type in (_F.TYPE_MESSAGE, _F.TYPE_GROUP):
        return _message_value(field.message_type, path, in_progress, budget)
    raise SchemaMappingError(f"unsupported Protobuf field type {field.type} at {path}")


def _message_value(
    descriptor: Descriptor, path: str, in_progress: tuple[str, ...], budget: ExpansionBudget
) -> tuple[pa.DataType, Converter]:
    full_name = descriptor.full_name
    if full_name == "google.protobuf.Timestamp":
        return UTC_MICROS, lambda t: t.seconds * 1_000_000 + t.nanos // 1000
    if full_name == "google.protobuf.Duration":
        # Iceberg has no interval type: micros as long (docs/type-mapping.md).
        return pa.int64(), lambda d: d.seconds * 1_000_000 + d.nanos // 1000
    if full_name in _WRAPPERS:
        wrapped = _WRAPPERS[full_name]
        if pa.types.is_decimal(wrapped):
            return wrapped, lambda w: decimal.Decimal(w.value)
        return wrapped, lambda w: w.value
    if full_name in _JSON_TEXT:
        return pa.string(), lambda m: json_format.MessageToJson(m, indent=None, sort_keys=True)
    return _message(descriptor, path, in_progress, budget)
