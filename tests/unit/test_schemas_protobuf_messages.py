"""Protobuf: the table's message, Confluent message indexes, imports and nested types.

The schema declares a helper message first and the records' message second, imports a
message from another file (a registry reference) and nests a type: the layout that once
landed 1,000 records as rows of nulls. Messages are built from FileDescriptorProtos at
run time (no protoc here) and serialized by confluent-kafka's ProtobufSerializer.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, message_factory, timestamp_pb2
from google.protobuf.descriptor_pool import DescriptorPool

from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.schemas.decoding import DecoderSpec, build_decoder, serialize_schema
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.protobuf_types import message_index_path
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import SchemaResolutionError, protobuf_message, resolve_schema

F = descriptor_pb2.FieldDescriptorProto


@dataclass(frozen=True)
class ShopMessages:
    package: str
    helper: Any  # first top-level message: {note}
    order: Any  # second: {id, total: common Money, lines: [Line], at: Timestamp, status}
    line: Any  # Order.Line, nested
    money: Any  # from the imported file


def _add_field(
    msg: Any, name: str, number: int, ftype: int, type_name: str = "", **kw: Any
) -> None:
    field = msg.field.add(name=name, number=number, type=ftype, label=F.LABEL_OPTIONAL, **kw)
    if type_name:
        field.type_name = type_name


def shop_messages(package: str | None = None) -> ShopMessages:
    """Two files: `<pkg>_common.proto` (Money) and `<pkg>_shop.proto` importing it.

    (No `/` in the file names: the serializer registers an import under a subject named
    after its file, and the dev registry cannot route a subject holding a `/`.)
    """
    package = package or f"shop{uuid.uuid4().hex[:8]}"
    common = descriptor_pb2.FileDescriptorProto(
        name=f"{package}_common.proto", package=f"{package}.common", syntax="proto3"
    )
    money = common.message_type.add(name="Money")
    _add_field(money, "units", 1, F.TYPE_INT64)
    _add_field(money, "currency", 2, F.TYPE_STRING)

    shop = descriptor_pb2.FileDescriptorProto(
        name=f"{package}_shop.proto", package=package, syntax="proto3"
    )
    shop.dependency.extend([common.name, "google/protobuf/timestamp.proto"])
    status = shop.enum_type.add(name="Status")
    status.value.add(name="NEW", number=0)
    status.value.add(name="PAID", number=1)
    helper = shop.message_type.add(name="Helper")
    _add_field(helper, "note", 1, F.TYPE_STRING)
    order = shop.message_type.add(name="Order")
    line = order.nested_type.add(name="Line")
    _add_field(line, "sku", 1, F.TYPE_STRING)
    _add_field(line, "qty", 2, F.TYPE_INT32)
    _add_field(order, "id", 1, F.TYPE_INT64)
    _add_field(order, "total", 2, F.TYPE_MESSAGE, f".{package}.common.Money")
    lines = order.field.add(name="lines", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED)
    lines.type_name = f".{package}.Order.Line"
    _add_field(order, "at", 4, F.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    _add_field(order, "status", 5, F.TYPE_ENUM, f".{package}.Status")

    pool = DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(common)
    pool.Add(shop)

    def cls(name: str) -> Any:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))

    return ShopMessages(
        package=package,
        helper=cls(f"{package}.Helper"),
        order=cls(f"{package}.Order"),
        line=cls(f"{package}.Order.Line"),
        money=cls(f"{package}.common.Money"),
    )


def serialize(registry_client: Any, topic: str, message: Any) -> bytes:
    serializer = ProtobufSerializer(
        type(message), registry_client, {"use.deprecated.format": False}
    )
    data = serializer(message, SerializationContext(topic, MessageField.VALUE))
    assert data is not None
    return data


def an_order(shop: ShopMessages, i: int) -> Any:
    order = shop.order(id=i, status=i % 2)
    order.total.units = 100 * i
    order.total.currency = "EUR"
    order.lines.add(sku=f"s{i}", qty=i)
    order.at.FromSeconds(1_700_000_000 + i)
    return order


def test_index_paths_of_top_level_and_nested_messages() -> None:
    shop = shop_messages()
    assert message_index_path(shop.helper.DESCRIPTOR) == (0,)
    assert message_index_path(shop.order.DESCRIPTOR) == (1,)
    assert message_index_path(shop.line.DESCRIPTOR) == (1, 0)


def test_several_top_level_messages_need_message_and_records_are_checked() -> None:
    registry = RegistrySettings(url=f"mock://{uuid.uuid4().hex}")
    topic = "shop-orders"
    shop = shop_messages()
    client = registry.client()
    records = [serialize(client, topic, an_order(shop, i)) for i in range(3)]

    with pytest.raises(SchemaResolutionError, match=r"2 top-level messages .*set `message:`"):
        resolve_schema(topic, FormatSpec(format="protobuf"), None, (), registry)
    with pytest.raises(SchemaResolutionError, match="not found in the Protobuf schema"):
        resolve_schema(topic, FormatSpec(format="protobuf", message="Nope"), None, (), registry)
    with pytest.raises(SchemaResolutionError, match="declared in the imported file"):
        spec = FormatSpec(format="protobuf", message=f"{shop.package}.common.Money")
        resolve_schema(topic, spec, None, (), registry)

    value = FormatSpec(format="protobuf", message="Order")
    target = resolve_schema(topic, value, None, (), registry).arrow_schema
    assert target.names == ["id", "total", "lines", "at", "status"]
    assert protobuf_message(target, "value") == f"{shop.package}.Order"

    # Records of the helper message (index [0]) and of the nested Line type ([1, 0]) were
    # written to the same topic with the same schema: bad records, never rows of nulls.
    helper = serialize(client, topic, shop.helper(note="not an order"))
    line = serialize(client, topic, shop.line(sku="x", qty=1))
    decoder = build_decoder(DecoderSpec(topic, value, None, (), registry, serialize_schema(target)))
    messages = [
        KafkaMessage(topic, 0, offset, None, None, data)
        for offset, data in enumerate([*records, helper, line])
    ]
    result = decoder.decode(messages)
    assert result.batch.num_rows == 3
    rows = result.batch.to_pylist()
    assert [r["id"] for r in rows] == [0, 1, 2]
    assert rows[2]["total"] == {"units": 200, "currency": "EUR"}
    assert rows[2]["lines"] == [{"sku": "s2", "qty": 2}]
    assert rows[1]["status"] == "PAID" and rows[2]["at"].timestamp() == 1_700_000_002
    assert [(f.offset, f.describe()) for f in result.failures] == [
        (
            3,
            f"{topic}[0]@3: record holds Protobuf message '{shop.package}.Helper' (schema id "
            f"{_schema_id(helper)}, message indexes [0]), the table holds "
            f"'{shop.package}.Order' messages",
        ),
        (
            4,
            f"{topic}[0]@4: record holds Protobuf message '{shop.package}.Order.Line' (schema id "
            f"{_schema_id(line)}, message indexes [1, 0]), the table holds "
            f"'{shop.package}.Order' messages",
        ),
    ]


def test_a_single_message_schema_needs_no_message_key() -> None:
    registry = RegistrySettings(url=f"mock://{uuid.uuid4().hex}")
    shop = shop_messages()
    serialize(registry.client(), "money", shop.money(units=5, currency="USD"))
    target = resolve_schema("money", FormatSpec(format="protobuf"), None, (), registry)
    assert target.arrow_schema.names == ["units", "currency"]
    assert protobuf_message(target.arrow_schema, "value") == f"{shop.package}.common.Money"


def _schema_id(data: bytes) -> int:
    return int.from_bytes(data[1:5], "big")
