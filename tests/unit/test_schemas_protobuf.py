"""Protobuf: type mapping and decoding of Confluent-framed messages (real ProtobufSerializer).

The test message type is built from a FileDescriptorProto at run time (no protoc here).
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import (
    descriptor_pb2,
    duration_pb2,
    message_factory,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.descriptor_pool import DescriptorPool

from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.schemas.arrow_values import SchemaMappingError
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.protobuf_types import map_message
from tableflow_core.schemas.registry import RegistrySettings
from tests.decoders import resolved_decoder

F = descriptor_pb2.FieldDescriptorProto
UTC = dt.UTC


def _field(
    msg: Any,
    name: str,
    number: int,
    ftype: int,
    label: int = F.LABEL_OPTIONAL,
    type_name: str = "",
    **kw: Any,
) -> None:
    field = msg.field.add(name=name, number=number, type=ftype, label=label, **kw)
    if type_name:
        field.type_name = type_name


def build_file(package: str, recursive: bool = False) -> Any:
    """A proto3 file exercising every mapping row; returns the pool's message classes."""
    file = descriptor_pb2.FileDescriptorProto(
        name=f"{package}/order.proto", package=package, syntax="proto3"
    )
    file.dependency.extend(
        [
            "google/protobuf/timestamp.proto",
            "google/protobuf/duration.proto",
            "google/protobuf/wrappers.proto",
            "google/protobuf/struct.proto",
        ]
    )
    status = file.enum_type.add(name="Status")
    status.value.add(name="UNKNOWN", number=0)
    status.value.add(name="SHIPPED", number=1)
    order = file.message_type.add(name="Order")
    item = order.nested_type.add(name="Item")
    _field(item, "sku", 1, F.TYPE_STRING)
    _field(item, "qty", 2, F.TYPE_INT32)
    entry = order.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, F.TYPE_STRING)
    _field(entry, "value", 2, F.TYPE_INT64)
    order.oneof_decl.add(name="payment")
    order.oneof_decl.add(name="_note")
    _field(order, "id", 1, F.TYPE_INT64)
    _field(order, "price", 2, F.TYPE_DOUBLE)
    _field(order, "ratio", 3, F.TYPE_FLOAT)
    _field(order, "small", 4, F.TYPE_SINT32)
    _field(order, "count", 5, F.TYPE_UINT32)
    _field(order, "big", 6, F.TYPE_UINT64)
    _field(order, "ok", 7, F.TYPE_BOOL)
    _field(order, "name", 8, F.TYPE_STRING)
    _field(order, "blob", 9, F.TYPE_BYTES)
    _field(order, "status", 10, F.TYPE_ENUM, type_name=f".{package}.Status")
    _field(order, "items", 11, F.TYPE_MESSAGE, F.LABEL_REPEATED, f".{package}.Order.Item")
    _field(order, "attrs", 12, F.TYPE_MESSAGE, F.LABEL_REPEATED, f".{package}.Order.AttrsEntry")
    _field(order, "created", 13, F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    _field(order, "ttl", 14, F.TYPE_MESSAGE, type_name=".google.protobuf.Duration")
    _field(order, "discount", 15, F.TYPE_MESSAGE, type_name=".google.protobuf.DoubleValue")
    _field(order, "extra", 16, F.TYPE_MESSAGE, type_name=".google.protobuf.Struct")
    _field(order, "card", 17, F.TYPE_STRING, oneof_index=0)
    _field(order, "cash", 18, F.TYPE_INT64, oneof_index=0)
    _field(order, "note", 19, F.TYPE_STRING, oneof_index=1, proto3_optional=True)
    _field(order, "main_item", 20, F.TYPE_MESSAGE, type_name=f".{package}.Order.Item")
    _field(order, "tags", 21, F.TYPE_STRING, F.LABEL_REPEATED)
    if recursive:
        _field(item, "parent", 3, F.TYPE_MESSAGE, type_name=f".{package}.Order")
    pool = DescriptorPool()
    for dep in (timestamp_pb2, duration_pb2, wrappers_pb2, struct_pb2):
        pool.AddSerializedFile(dep.DESCRIPTOR.serialized_pb)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Order"))


EXPECTED: dict[str, pa.DataType] = {
    "id": pa.int64(),
    "price": pa.float64(),
    "ratio": pa.float32(),
    "small": pa.int32(),
    "count": pa.int64(),
    "big": pa.decimal128(20, 0),
    "ok": pa.bool_(),
    "name": pa.string(),
    "blob": pa.binary(),
    "status": pa.string(),
    "items": pa.list_(pa.field("element", pa.struct([("sku", pa.string()), ("qty", pa.int32())]))),
    "attrs": pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.int64())),
    "created": pa.timestamp("us", tz="UTC"),
    "ttl": pa.int64(),
    "discount": pa.float64(),
    "extra": pa.string(),
    "card": pa.string(),
    "cash": pa.int64(),
    "note": pa.string(),
    "main_item": pa.struct([("sku", pa.string()), ("qty", pa.int32())]),
    "tags": pa.list_(pa.field("element", pa.string())),
}


def proto_bytes(registry: RegistrySettings, topic: str, message: Any) -> bytes:
    serializer = ProtobufSerializer(
        type(message), registry.client(), {"use.deprecated.format": False}
    )
    data = serializer(message, SerializationContext(topic, MessageField.VALUE))
    assert data is not None
    return data


def full_order(order_cls: Any) -> Any:
    order = order_cls(
        id=1,
        price=2.5,
        ratio=0.5,
        small=-3,
        count=4_000_000_000,
        big=2**64 - 1,
        ok=True,
        name="n",
        blob=b"\x01",
        status=1,
        card="visa",
        note="hello",
        tags=["a"],
    )
    order.items.add(sku="s1", qty=2)
    order.attrs["k"] = 9
    order.created.FromDatetime(dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC))
    order.ttl.FromSeconds(90)
    order.discount.value = 0.25
    order.extra.update({"b": 1, "a": "x"})
    return order


def test_mapping_of_every_protobuf_construct() -> None:
    order_cls = build_file(f"m{uuid.uuid4().hex[:8]}")
    arrow_type = map_message(order_cls.DESCRIPTOR).arrow_type
    assert {f.name: f.type for f in arrow_type} == EXPECTED
    with pytest.raises(SchemaMappingError, match="recursive Protobuf message"):
        map_message(build_file(f"r{uuid.uuid4().hex[:8]}", recursive=True).DESCRIPTOR)


def test_decode_through_the_registry() -> None:
    registry = RegistrySettings(url=f"mock://{uuid.uuid4().hex}")
    topic = "proto-orders"
    order_cls = build_file(f"p{uuid.uuid4().hex[:8]}")
    full = proto_bytes(registry, topic, full_order(order_cls))
    empty = proto_bytes(registry, topic, order_cls(id=2, cash=5))
    decoder, target = resolved_decoder(topic, FormatSpec(format="protobuf"), registry=registry)
    assert {f.name: f.type for f in target} == EXPECTED
    result = decoder.decode(
        [
            KafkaMessage(topic, 0, 0, None, None, full),
            KafkaMessage(topic, 0, 1, None, None, empty),
            KafkaMessage(topic, 0, 2, None, None, full + b"\x0a\x10abc"),  # cut-off field
        ]
    )
    first, second = result.batch.to_pylist()
    assert first == {
        "id": 1,
        "price": 2.5,
        "ratio": 0.5,
        "small": -3,
        "count": 4_000_000_000,
        "big": Decimal(2**64 - 1),
        "ok": True,
        "name": "n",
        "blob": b"\x01",
        "status": "SHIPPED",
        "items": [{"sku": "s1", "qty": 2}],
        "attrs": [("k", 9)],
        "created": dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
        "ttl": 90_000_000,
        "discount": 0.25,
        "extra": '{"a": "x", "b": 1.0}',
        "card": "visa",
        "cash": None,
        "note": "hello",
        "main_item": None,
        "tags": ["a"],
    }
    # proto3 scalars without presence read as their defaults; messages, wrappers,
    # oneof members and `optional` fields that are unset are null
    assert second["id"] == 2 and second["cash"] == 5 and second["card"] is None
    assert second["name"] == "" and second["status"] == "UNKNOWN"
    assert second["created"] is None and second["discount"] is None and second["note"] is None
    [failure] = result.failures
    assert failure.offset == 2 and "Protobuf payload" in failure.reason
