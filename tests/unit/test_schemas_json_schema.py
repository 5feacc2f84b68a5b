"""JSON Schema: type mapping and decoding of Confluent-framed JSON (real JSONSerializer)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.schemas.arrow_values import SchemaMappingError
from tableflow_core.schemas.decoding import DecoderSpec, build_decoder, serialize_schema
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.json_schema_types import map_json_schema
from tableflow_core.schemas.registry import RegistrySettings
from tests.decoders import resolved_decoder

UTC = dt.UTC

SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "definitions": {
        "Address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": ["string", "null"]}},
            "required": ["city"],
        }
    },
    "properties": {
        "id": {"type": "integer"},
        "price": {"type": "number"},
        "paid": {"type": "boolean"},
        "name": {"type": "string"},
        "created": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "ref": {"type": "string", "format": "uuid"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {"$ref": "#/definitions/Address"},
        "maybe": {"oneOf": [{"type": "null"}, {"type": "integer"}]},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "free": {"type": "object"},
        "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "amount": {"type": "number", "connect.type": "bytes", "precision": 10, "scale": 2},
    },
    "required": ["id", "name"],
}

EXPECTED_TYPES: dict[str, pa.DataType] = {
    "id": pa.int64(),
    "price": pa.float64(),
    "paid": pa.bool_(),
    "name": pa.string(),
    "created": pa.timestamp("us", tz="UTC"),
    "day": pa.date32(),
    "ref": pa.string(),
    "tags": pa.list_(pa.field("element", pa.string())),
    "address": pa.struct([("city", pa.string()), ("zip", pa.string())]),
    "maybe": pa.int64(),
    "counts": pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.int64())),
    "free": pa.string(),
    "either": pa.string(),
    "amount": pa.decimal128(10, 2),
}


def json_bytes(
    registry: RegistrySettings, topic: str, value: dict[str, Any], schema: dict[str, Any] = SCHEMA
) -> bytes:
    serializer = JSONSerializer(json.dumps(schema), registry.client())
    data = serializer(value, SerializationContext(topic, MessageField.VALUE))
    assert data is not None
    return data


def test_mapping_of_every_json_schema_construct() -> None:
    mapping = map_json_schema(json.dumps(SCHEMA))
    assert mapping.is_record
    fields = {f.name: f for f in mapping.arrow_type}
    assert {name: f.type for name, f in fields.items()} == EXPECTED_TYPES
    assert all(f.nullable for f in fields.values())


def test_decode_keeps_types_and_timezone_meaning() -> None:
    registry = RegistrySettings(url=f"mock://{uuid.uuid4().hex}")
    topic = "orders"
    value = {
        "id": 7,
        "price": 9.5,
        "paid": True,
        "name": "o",
        "created": "2024-05-06T09:08:09.123456+02:00",
        "day": "2024-02-29",
        "ref": "12345678-1234-5678-1234-567812345678",
        "tags": ["a", "b"],
        "address": {"city": "Oslo"},
        "maybe": None,
        "counts": {"x": 1},
        "free": {"b": [1, 2], "a": None},
        "either": 3,
        "amount": 12.34,
    }
    data = json_bytes(registry, topic, value)
    decoder, target = resolved_decoder(
        topic, FormatSpec(format="json_schema"), None, ("offset",), registry
    )
    older = json_bytes(
        registry,
        topic,
        {"id": 8, "name": "old"},
        {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}},
    )
    result = decoder.decode(
        [
            KafkaMessage(topic, 0, 5, None, None, data),
            KafkaMessage(topic, 0, 6, None, None, older),
            KafkaMessage(
                topic, 0, 7, None, None, data[:5] + b'{"id": "x", "created": "not a time"}'
            ),
        ]
    )
    assert result.batch.schema.equals(target)
    first, second = result.batch.to_pylist()
    assert first["created"] == dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    assert first["day"] == dt.date(2024, 2, 29)
    assert first["address"] == {"city": "Oslo", "zip": None}
    assert first["counts"] == [("x", 1)]
    assert first["free"] == '{"a":null,"b":[1,2]}'
    assert first["either"] == "3"
    assert first["amount"] == Decimal("12.34")
    assert first["tags"] == ["a", "b"] and first["_kafka_offset"] == 5
    assert second["id"] == 8 and second["created"] is None and second["_kafka_offset"] == 6
    [failure] = result.failures
    assert failure.offset == 7 and "does not fit the table schema" in failure.reason


def test_recursive_ref_is_a_clear_error() -> None:
    schema = {"type": "object", "properties": {"child": {"$ref": "#"}}}
    with pytest.raises(SchemaMappingError, match="recursive"):
        map_json_schema(json.dumps(schema))


def test_non_json_payload_is_a_failure() -> None:
    registry = RegistrySettings(url=f"mock://{uuid.uuid4().hex}")
    topic = "broken"
    good = json_bytes(registry, topic, {"id": 1, "name": "n"})
    registry.client().register_schema("x", Schema(json.dumps(SCHEMA), "JSON"))
    target = pa.schema([("id", pa.int64())])
    decoder = build_decoder(
        DecoderSpec(
            topic, FormatSpec(format="json_schema"), None, (), registry, serialize_schema(target)
        )
    )
    result = decoder.decode([KafkaMessage(topic, 1, 3, None, None, good[:5] + b"{not json")])
    assert result.batch.num_rows == 0
    assert "invalid JSON payload" in result.failures[0].reason
