"""Round trips through the real serializers, the real registry process and the real broker."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tests.avro_records import avro_record, nullable
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name

AVRO_SCHEMA = avro_record(
    "Payment", namespace="tableflow.test", id="string", cents="long", note=nullable("string")
)
JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Payment",
    "type": "object",
    "properties": {"id": {"type": "string"}, "cents": {"type": "integer"}},
    "required": ["id", "cents"],
}


def _round_trip(
    kafka_broker: KafkaBroker,
    serialize: Callable[[Any, SerializationContext], bytes | None],
    deserialize: Callable[[bytes, SerializationContext], Any],
    values: list[Any],
) -> tuple[str, list[Any]]:
    topic = kafka_broker.create_topic(unique_name("serde"))
    producer = Producer(kafka_broker.producer_config())
    ctx = SerializationContext(topic, MessageField.VALUE)
    for index, value in enumerate(values):
        producer.produce(topic, key=str(index).encode(), value=serialize(value, ctx))
    assert producer.flush(30) == 0
    consumer = Consumer(kafka_broker.consumer_config(group_id=unique_name("g")))
    consumer.assign([TopicPartition(topic, 0, 0)])
    decoded: list[Any] = []
    try:
        while len(decoded) < len(values):
            message = consumer.poll(10)
            assert message is not None, f"only {len(decoded)} of {len(values)} messages arrived"
            assert message.error() is None, message.error()
            decoded.append(deserialize(message.value(), ctx))
    finally:
        consumer.close()
    return topic, decoded


def test_avro_round_trip(kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer) -> None:
    client = schema_registry.client()
    serializer = AvroSerializer(client, json.dumps(AVRO_SCHEMA))
    deserializer = AvroDeserializer(schema_registry.client())  # fresh cache: fetches by id
    values = [
        {"id": f"p{i}", "cents": i * 101, "note": None if i % 2 else f"n{i}"} for i in range(50)
    ]
    topic, decoded = _round_trip(kafka_broker, serializer, deserializer, values)
    assert decoded == values
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.version == 1
    assert json.loads(latest.schema.schema_str) == AVRO_SCHEMA


def test_json_schema_round_trip(
    kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer
) -> None:
    client = schema_registry.client()
    serializer = JSONSerializer(json.dumps(JSON_SCHEMA), client)
    deserializer = JSONDeserializer(None, schema_registry_client=schema_registry.client())
    values = [{"id": f"p{i}", "cents": i} for i in range(20)]
    topic, decoded = _round_trip(kafka_broker, serializer, deserializer, values)
    assert decoded == values
    assert client.get_latest_version(f"{topic}-value").schema.schema_type == "JSON"


def _order_message_class() -> type:
    """A protobuf message class built at runtime from a descriptor (no protoc needed)."""
    file_proto = descriptor_pb2.FileDescriptorProto(
        name=f"{unique_name('tableflow_order')}.proto", package="tableflowtest", syntax="proto3"
    )
    message = file_proto.message_type.add(name="Order")
    field = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="order_id", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    message.field.add(name="quantity", number=2, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    message.field.add(name="tags", number=3, type=field.TYPE_STRING, label=field.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tableflowtest.Order"))


def test_protobuf_round_trip(
    kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer
) -> None:
    order_class = _order_message_class()
    client = schema_registry.client()
    serializer = ProtobufSerializer(order_class, client, {"use.deprecated.format": False})
    deserializer = ProtobufDeserializer(
        order_class,
        {"use.deprecated.format": False},
        schema_registry_client=schema_registry.client(),
    )
    values = [order_class(order_id=f"o{i}", quantity=i, tags=["a", f"t{i}"]) for i in range(20)]
    topic, decoded = _round_trip(kafka_broker, serializer, deserializer, values)
    assert [m.SerializeToString() for m in decoded] == [m.SerializeToString() for m in values]
    assert decoded[3].order_id == "o3" and list(decoded[3].tags) == ["a", "t3"]
    assert client.get_latest_version(f"{topic}-value").schema.schema_type == "PROTOBUF"
