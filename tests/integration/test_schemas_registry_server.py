"""Each registry format end to end against the REAL dev registry server (HTTP).

Real serializers register schemas and frame records; resolve_schema reads the table schema
over HTTP; the decoder fetches writer schemas by id over HTTP.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.schemas.decoding import DecoderSpec, build_decoder, serialize_schema
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import resolve_schema
from tests.decoders import resolved_decoder
from tests.unit.test_schemas_protobuf import build_file

UTC = dt.UTC


def decode_all(
    registry: RegistrySettings, topic: str, fmt: str, payloads: list[bytes]
) -> tuple[pa.Schema, Any]:
    spec = FormatSpec(format=fmt)  # type: ignore[arg-type]
    decoder, target = resolved_decoder(topic, spec, None, ("offset",), registry)
    messages = [KafkaMessage(topic, 0, i, None, None, p) for i, p in enumerate(payloads)]
    return target, decoder.decode(messages)


def test_avro_through_the_real_registry(schema_registry: Any) -> None:
    registry = RegistrySettings(url=schema_registry.url)
    topic = f"avro-{uuid.uuid4().hex[:8]}"
    v1 = {
        "type": "record",
        "name": "E",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    }
    v2 = {
        **v1,
        "fields": [*v1["fields"], {"name": "tag", "type": ["null", "string"], "default": None}],
    }
    ctx = SerializationContext(topic, MessageField.VALUE)
    at = dt.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    old = AvroSerializer(registry.client(), json.dumps(v1))({"id": 1, "at": at}, ctx)
    new = AvroSerializer(registry.client(), json.dumps(v2))({"id": 2, "at": at, "tag": "t"}, ctx)
    assert old is not None and new is not None
    unknown = new[:1] + (987_654).to_bytes(4, "big") + new[5:]
    target, result = decode_all(registry, topic, "avro", [old, new, unknown])
    assert target.names == ["id", "at", "tag", "_kafka_offset"]
    assert result.batch.to_pylist() == [
        {"id": 1, "at": at, "tag": None, "_kafka_offset": 0},
        {"id": 2, "at": at, "tag": "t", "_kafka_offset": 1},
    ]
    [failure] = result.failures
    assert failure.offset == 2 and "unknown schema id 987654" in failure.reason


def test_json_schema_through_the_real_registry(schema_registry: Any) -> None:
    registry = RegistrySettings(url=schema_registry.url)
    topic = f"json-{uuid.uuid4().hex[:8]}"
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "at": {"type": "string", "format": "date-time"},
            "nested": {"type": "object", "properties": {"x": {"type": "number"}}},
        },
    }
    data = JSONSerializer(json.dumps(schema), registry.client())(
        {"id": 1, "at": "2024-01-02T03:04:05Z", "nested": {"x": 1.5}},
        SerializationContext(topic, MessageField.VALUE),
    )
    assert data is not None
    target, result = decode_all(registry, topic, "json_schema", [data])
    assert target.field("at").type == pa.timestamp("us", tz="UTC")
    assert result.failures == []
    assert result.batch.to_pylist() == [
        {
            "id": 1,
            "at": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
            "nested": {"x": 1.5},
            "_kafka_offset": 0,
        }
    ]


def test_protobuf_through_the_real_registry(schema_registry: Any) -> None:
    registry = RegistrySettings(url=schema_registry.url)
    topic = f"proto-{uuid.uuid4().hex[:8]}"
    order_cls = build_file(f"s{uuid.uuid4().hex[:8]}")
    order = order_cls(id=5, name="x", status=1)
    order.created.FromDatetime(dt.datetime(2024, 1, 2, tzinfo=UTC))
    serializer = ProtobufSerializer(order_cls, registry.client(), {"use.deprecated.format": False})
    data = serializer(order, SerializationContext(topic, MessageField.VALUE))
    assert data is not None
    target, result = decode_all(registry, topic, "protobuf", [data])
    assert result.failures == []
    [row] = result.batch.to_pylist()
    assert (row["id"], row["name"], row["status"], row["created"]) == (
        5,
        "x",
        "SHIPPED",
        dt.datetime(2024, 1, 2, tzinfo=UTC),
    )
    assert target.field("created").type == pa.timestamp("us", tz="UTC")


def test_registry_down_stops_decoding_instead_of_skipping_records() -> None:
    from tableflow_core.dev.processes import free_port
    from tableflow_core.schemas.decoding import DecodingError
    from tableflow_core.schemas.resolve import SchemaResolutionError

    down = RegistrySettings(url=f"http://127.0.0.1:{free_port('127.0.0.1')}")
    target = pa.schema([("id", pa.int64())])
    decoder = build_decoder(
        DecoderSpec("t", FormatSpec(format="avro"), None, (), down, serialize_schema(target))
    )
    framed = b"\x00" + (1).to_bytes(4, "big") + b"\x02"
    with pytest.raises(DecodingError, match=r"t\[0\]@7: schema registry"):
        decoder.decode([KafkaMessage("t", 0, 7, None, None, framed)])
    with pytest.raises(SchemaResolutionError, match="unreachable"):
        resolve_schema("t", FormatSpec(format="avro"), None, (), down)
