"""`resolve_schema`: the table's Arrow schema for a topic, read from the registry over HTTP.

Used by `plan` (no JVM) and by `apply`. Data columns come first (in the writer schema's
field order), then the requested metadata columns in the order given. Every column is
nullable (docs/type-mapping.md, "Nullability").
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
from confluent_kafka.schema_registry import RegisteredSchema, Schema
from confluent_kafka.schema_registry.error import SchemaRegistryError

from tableflow_core.config.models.tables import CDC_METADATA_COLUMNS
from tableflow_core.errors import TableflowError
from tableflow_core.kafka.latest_records import LatestRecord
from tableflow_core.redaction import redact_url
from tableflow_core.schemas import (
    avro_types,
    connect_json,
    debezium,
    json_schema_types,
    protobuf_types,
)
from tableflow_core.schemas.arrow_values import SchemaMappingError
from tableflow_core.schemas.formats import FormatSpec, metadata_field
from tableflow_core.schemas.plain_json import json_fields
from tableflow_core.schemas.references import SERIALIZED, fetch_version, self_contained_text
from tableflow_core.schemas.registry import RegistrySettings

_T = TypeVar("_T")

VALUE_COLUMN = "value"


class SchemaResolutionError(TableflowError, RuntimeError):
    """The topic's schema cannot be resolved (missing subject, unmappable type, ...)."""


@dataclass(frozen=True)
class ResolvedSchema:
    arrow_schema: pa.Schema  # the table's columns, in order (data + metadata columns)
    registry_schema_id: int | None
    registry_version: int | None
    subject: str | None
    fingerprint: str  # stable hash of the column names/types, for plan staleness checks


def schema_fingerprint(schema: pa.Schema) -> str:
    text = schema.remove_metadata().to_string(show_field_metadata=False, show_schema_metadata=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


# Schema metadata naming the Protobuf message a side's records must hold (full name): the
# decoder fails a record of any other message type instead of landing it as nulls.
PROTOBUF_MESSAGE_METADATA = {
    "value": b"tableflow.value.protobuf_message",
    "key": b"tableflow.key.protobuf_message",
}


def protobuf_message(schema: pa.Schema, side: str) -> str | None:
    """The Protobuf message full name the table's `side` ("value"/"key") records must hold."""
    found = (schema.metadata or {}).get(PROTOBUF_MESSAGE_METADATA[side])
    return found.decode("utf-8") if found is not None else None


def resolve_schema(
    topic: str,
    value: FormatSpec,
    key: FormatSpec | None,
    metadata_columns: tuple[str, ...],
    registry: RegistrySettings | None,
    latest: Mapping[str, RegisteredSchema] | None = None,
    sample: LatestRecord | None = None,
) -> ResolvedSchema:
    """`latest`: subjects' latest versions already read in one request
    (`schemas.latest_schemas`), used for a side read at version `latest` in text form.
    `sample`: the topic's latest record (`kafka.latest_records`), whose embedded schemas
    are a `connect_json` side's."""
    registered = _registered(topic, value, is_key=False, registry=registry, latest=latest)
    value_type, is_record, value_message = _arrow_type(
        topic, value, registered, registry, is_key=False, sample=sample
    )
    messages: dict[bytes, bytes] = {}
    if value_message is not None:
        messages[PROTOBUF_MESSAGE_METADATA["value"]] = value_message.encode("utf-8")
    cdc = [c for c in metadata_columns if c in CDC_METADATA_COLUMNS]
    if cdc and value.envelope is None:
        raise SchemaResolutionError(
            f"topic {topic!r}: metadata columns {cdc} come from change events: they need "
            "`value: {..., envelope: debezium}`"
        )
    if value.envelope == "debezium":
        if registered:
            where = f"subject {registered.subject!r} version {registered.version}"
        else:
            where = f"the schema of record {sample.describe()}" if sample else "value"
        try:
            fields = debezium.after_fields(value_type, where)
        except debezium.NotAnEnvelope as exc:
            raise SchemaResolutionError(f"topic {topic!r}: {exc}") from None
    elif is_record:
        assert isinstance(value_type, pa.StructType)
        fields = [value_type.field(i) for i in range(value_type.num_fields)]
    else:
        fields = [pa.field(VALUE_COLUMN, value_type)]
    if metadata_columns:
        key_type = pa.binary()
        if "key" in metadata_columns and key is not None:
            key_registered = _registered(topic, key, is_key=True, registry=registry, latest=latest)
            key_type, _, key_message = _arrow_type(
                topic, key, key_registered, registry, is_key=True, sample=sample
            )
            if key_message is not None:
                messages[PROTOBUF_MESSAGE_METADATA["key"]] = key_message.encode("utf-8")
        fields.extend(metadata_field(name, key_type) for name in metadata_columns)
    names = [f.name for f in fields]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise SchemaResolutionError(
            f"topic {topic!r}: columns {clashes} appear twice (a value field clashes with a "
            "metadata column name)"
        )
    schema = pa.schema(fields, metadata=messages or None)
    return ResolvedSchema(
        arrow_schema=schema,
        registry_schema_id=registered.schema_id if registered else None,
        registry_version=registered.version if registered else None,
        subject=registered.subject if registered else None,
        fingerprint=schema_fingerprint(schema),
    )


def _registered(
    topic: str,
    spec: FormatSpec,
    is_key: bool,
    registry: RegistrySettings | None,
    latest: Mapping[str, RegisteredSchema] | None = None,
) -> RegisteredSchema | None:
    if not spec.uses_registry:
        return None
    side = "key" if is_key else "value"
    if registry is None:
        raise SchemaResolutionError(
            f"topic {topic!r}: {side} format {spec.format!r} needs a schema registry; none is configured"
        )
    subject = spec.subject_for(topic, is_key)
    fmt = SERIALIZED if spec.format == "protobuf" else None
    client = registry.client()
    listed = (latest or {}).get(subject) if spec.version == "latest" and fmt is None else None
    try:
        found = listed or fetch_version(client, subject, spec.version, fmt)
    except SchemaRegistryError as exc:
        raise SchemaResolutionError(
            f"topic {topic!r}: cannot read {side} subject {subject!r} version {spec.version} "
            f"from the registry at {registry.display_url}: {redact_url(str(exc))}"
        ) from exc
    except Exception as exc:
        raise SchemaResolutionError(
            f"topic {topic!r}: schema registry at {registry.display_url} unreachable: "
            f"{redact_url(str(exc))}"
        ) from exc
    if found is None:  # the mock registry answers None for unknown subjects
        raise SchemaResolutionError(
            f"topic {topic!r}: {side} subject {subject!r} version {spec.version} not found in the registry"
        )
    expected = {"avro": "AVRO", "json_schema": "JSON", "protobuf": "PROTOBUF"}[spec.format]
    actual = found.schema.schema_type or "AVRO"
    if actual != expected:
        raise SchemaResolutionError(
            f"topic {topic!r}: subject {subject!r} holds a {actual} schema but the {side} "
            f"format is {spec.format!r}"
        )
    return found


def _arrow_type(
    topic: str,
    spec: FormatSpec,
    registered: RegisteredSchema | None,
    registry: RegistrySettings | None,
    is_key: bool,
    sample: LatestRecord | None = None,
) -> tuple[pa.DataType, bool, str | None]:
    """One side's whole value: its Arrow type, whether it is a record (-> columns) and,
    for Protobuf, the full name of the message its records hold."""
    try:
        if spec.format == "connect_json":
            arrow_type = _embedded_type(topic, sample, is_key)
            return arrow_type, pa.types.is_struct(arrow_type), None
        if registered is not None:
            assert registry is not None
            schema = registered.schema
            if spec.format == "avro":
                text = _self_contained(topic, schema, registry)
                avro = avro_types.map_avro_schema(text, spec.envelope == "debezium")
                return avro.arrow_type, avro.is_record, None
            if spec.format == "json_schema":
                text = _self_contained(topic, schema, registry)
                json_schema = json_schema_types.map_json_schema(text)
                return json_schema.arrow_type, json_schema.is_record, None
            file = _registry_call(
                topic,
                registry,
                lambda: protobuf_types.file_descriptor_for(schema, registry.client()),
            )
            message = spec.message
            if (
                message is None
                and spec.envelope == "debezium"
                and len(file.message_types_by_name) > 1
            ):
                # Debezium's envelope message is `Envelope` beside its Value, Source... types.
                message = "Envelope" if "Envelope" in file.message_types_by_name else None
            descriptor = protobuf_types.message_by_name(file, message)
            return protobuf_types.map_message(descriptor).arrow_type, True, descriptor.full_name
        if spec.format == "json":
            if is_key:
                return pa.string(), False, None
            return pa.struct(json_fields(spec.json_columns)), True, None
        return (pa.string() if spec.format == "string" else pa.binary()), False, None
    except SchemaMappingError as exc:
        side = "key" if is_key else "value"
        where = (
            f"subject {registered.subject!r} version {registered.version}" if registered else side
        )
        # No __cause__: plan.world reads a caused resolution error as "registry down", but
        # an unmappable schema is the table's problem (a plan blocker), not an outage.
        raise SchemaResolutionError(f"topic {topic!r}: {side} schema ({where}): {exc}") from None


def _embedded_type(topic: str, sample: LatestRecord | None, is_key: bool) -> pa.DataType:
    """The Arrow type of a `connect_json` side: its embedded schema in the topic's latest
    record (docs/cdc.md, "Debezium's JSON with embedded schemas")."""
    if sample is None:
        raise SchemaMappingError(
            f"no record with a value in the last records of topic {topic!r}: a connect_json "
            "table's schema is read from the topic's latest record (start the connector, "
            "then plan)"
        )
    data = sample.key if is_key else sample.value
    if data is None:
        return pa.binary()
    try:
        _, schema, _ = connect_json.split(data)
    except connect_json.NotConnectJson as exc:
        raise SchemaMappingError(f"record {sample.describe()}: {exc}") from None
    try:
        return connect_json.map_connect_schema(schema).arrow_type
    except SchemaMappingError as exc:
        raise SchemaMappingError(f"record {sample.describe()}: {exc}") from None


def _self_contained(topic: str, schema: Schema, registry: RegistrySettings) -> str:
    """The schema's text with its references folded in (`schemas.references`)."""
    return _registry_call(topic, registry, lambda: self_contained_text(schema, registry.client()))


def _registry_call(topic: str, registry: RegistrySettings, call: Callable[[], _T]) -> _T:
    """`call()`, a registry failure while it fetches references (not a mapping problem)
    raised as a caused SchemaResolutionError: plan reports the registry, not the table."""
    try:
        return call()
    except SchemaMappingError:
        raise
    except Exception as exc:
        raise SchemaResolutionError(
            f"topic {topic!r}: cannot read the schema's references from the registry at "
            f"{registry.display_url}: {redact_url(str(exc))}"
        ) from exc
