"""Schema evolution end to end: every change the registry allows lands with the right
table change and rows; a change Iceberg cannot follow is blocked by plan, with the reason,
before anything is written.

One project, three tables (Avro, JSON Schema, Protobuf) applied together:
1. v1 records, apply;
2. v2 schemas registered by the serializers (the dev registry checks Avro BACKWARD
   compatibility), v2 records; plan shows the table changes, among them removed fields
   ("kept"); apply; old and new rows read back right; plan converges;
3. more records, among them a Protobuf record of another message type: the Avro table
   keeps ingesting (a removed field no longer bricks it), the Protobuf table fails naming
   the record's topic/partition/offset and commits nothing;
4. an Avro v3 the registry allows (long -> double) but Iceberg cannot follow: plan blocks.
"""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, message_factory
from google.protobuf.descriptor_pool import DescriptorPool

from tableflow_core.config.loader import load_project
from tableflow_core.readers.duckdb_reader import duckdb_connection
from tableflow_core.tasks.apply import ApplyTask, PlanNotApplicableError
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.stack import unique_name
from tests.unit.test_schemas_protobuf_messages import serialize

pytestmark = pytest.mark.slow

F = descriptor_pb2.FieldDescriptorProto


def avro(version: int) -> dict[str, Any]:
    address_v1 = [{"name": "city", "type": "string"}, {"name": "old_zip", "type": "string"}]
    address_v2 = [
        {"name": "city", "type": "string"},
        {"name": "street", "type": ["null", "string"], "default": None},
    ]
    id_type = {1: "int", 2: "long", 3: "double"}[version]
    fields: list[dict[str, Any]] = [
        {"name": "id", "type": id_type},
        {"name": "price", "type": "float" if version == 1 else "double"},
        *([{"name": "legacy", "type": "string"}] if version == 1 else []),
        {"name": "name", "type": "string"},
        {
            "name": "color",
            "type": {
                "type": "enum",
                "name": "Color",
                "symbols": ["RED", "GREEN"] + ([] if version == 1 else ["BLUE"]),
            },
        },
        {
            "name": "address",
            "type": {
                "type": "record",
                "name": "Address",
                "fields": address_v1 if version == 1 else address_v2,
            },
        },
    ]
    if version > 1:
        fields.append({"name": "extra", "type": ["null", "string"], "default": None})
    return {"type": "record", "name": "Item", "namespace": "evolution", "fields": fields}


def json_schema(version: int) -> dict[str, Any]:
    obj = {"a": {"type": "string"}, **({"b": {"type": "string"}} if version == 1 else {})}
    if version > 1:
        obj["c"] = {"type": "integer"}
    properties: dict[str, Any] = {
        "id": {"type": "integer"},
        "amount": {"type": "number", "precision": 9 if version == 1 else 12, "scale": 2},
        **({"gone": {"type": "string"}} if version == 1 else {}),
        "obj": {"type": "object", "properties": obj},
    }
    if version > 1:
        properties["added"] = {"type": "boolean"}
    return {"title": "Doc", "type": "object", "properties": properties, "required": ["id"]}


def proto_classes(package: str, version: int) -> tuple[Any, Any]:
    """(Helper, Order): v1 Order {id, name=2, old=3}; v2 renames 2 to title, drops 3 and
    adds `added`=4 and a nested Line list. Helper is declared first in both."""
    file = descriptor_pb2.FileDescriptorProto(
        name=f"{package}_evo.proto", package=package, syntax="proto3"
    )
    helper = file.message_type.add(name="Helper")
    helper.field.add(name="note", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    order = file.message_type.add(name="Order")
    order.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    if version == 1:
        order.field.add(name="name", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        order.field.add(name="old", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    else:
        order.field.add(name="title", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        order.field.add(name="added", number=4, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
        line = order.nested_type.add(name="Line")
        line.field.add(name="sku", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        lines = order.field.add(name="lines", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED)
        lines.type_name = f".{package}.Order.Line"
    pool = DescriptorPool()
    pool.Add(file)
    return tuple(  # type: ignore[return-value]
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
        for name in ("Helper", "Order")
    )


def rows(catalog: Any, identifier: str, columns: str) -> tuple[list[tuple], list[tuple]]:
    """The same query answered from pyiceberg's scan and from DuckDB's iceberg_scan."""
    table = catalog.load_table(identifier)
    con = duckdb_connection()
    con.register("py_rows", table.scan().to_arrow())
    by_pyiceberg = con.sql(f"SELECT {columns} FROM py_rows ORDER BY id").fetchall()
    by_duckdb = con.sql(
        f"SELECT {columns} FROM iceberg_scan('{table.metadata_location}') ORDER BY id"
    ).fetchall()
    return by_pyiceberg, by_duckdb


def changes_of(plan: Any, table: str) -> set[tuple[str, str]]:
    return {
        (c.kind, c.path)
        for a in plan.actions
        if a.kind == "evolve_schema" and a.table == table
        for c in a.changes
    }


def test_every_allowed_change_applies_and_iceberg_incompatible_ones_are_blocked(
    stack_project, kafka_broker, schema_registry, catalog_server, spark
) -> None:
    client = schema_registry.client()
    topics = {name: unique_name(f"evo_{name}") for name in ("avro", "json", "proto")}
    kafka_broker.create_topics({t: 1 for t in topics.values()})
    producer = Producer(kafka_broker.producer_config())

    def send(name: str, data: bytes | None) -> None:
        assert data is not None
        producer.produce(topics[name], value=data)

    def context(name: str) -> SerializationContext:
        return SerializationContext(topics[name], MessageField.VALUE)

    package = f"evo{uuid.uuid4().hex[:8]}"
    _, order_v1 = proto_classes(package, 1)
    to_avro = AvroSerializer(client, json.dumps(avro(1)))
    to_json = JSONSerializer(json.dumps(json_schema(1)), client)
    for i in range(3):
        record = {
            "id": i, "price": 0.5 + i, "legacy": f"L{i}", "name": f"n{i}", "color": "GREEN",
            "address": {"city": "Oslo", "old_zip": f"0{i}"},
        }  # fmt: skip
        send("avro", to_avro(record, context("avro")))
        doc = {"id": i, "amount": 1234567.25, "gone": f"g{i}", "obj": {"a": "x", "b": f"b{i}"}}
        send("json", to_json(doc, context("json")))
        send("proto", serialize(client, topics["proto"], order_v1(id=i, name=f"n{i}", old="o")))
    assert producer.flush(30) == 0

    namespace = unique_namespace("evo")
    root = stack_project(
        namespace=namespace,
        tables=[
            {"name": "avro_t", "topic": topics["avro"], "value": {"format": "avro"}},
            {"name": "json_t", "topic": topics["json"], "value": {"format": "json_schema"}},
            {
                "name": "proto_t",
                "topic": topics["proto"],
                "value": {"format": "protobuf", "message": "Order"},
            },
        ],
    )
    project = load_project(root)
    first = ApplyTask(project, PlanTask(project, project.tables).run(), spark=spark).run()
    assert first.status == "success", [r.error for r in first.tables]

    # v2 of every schema, registered by the serializers (Avro: checked BACKWARD).
    helper_v2, order_v2 = proto_classes(package, 2)
    to_avro = AvroSerializer(client, json.dumps(avro(2)))
    to_json = JSONSerializer(json.dumps(json_schema(2)), client)
    for i in range(3, 6):
        record = {
            "id": 2**40 + i, "price": 1e300, "name": f"n{i}", "color": "BLUE",
            "address": {"city": "Rome", "street": f"s{i}"}, "extra": f"e{i}",
        }  # fmt: skip
        send("avro", to_avro(record, context("avro")))
        doc = {"id": i, "amount": 1234567890.75, "obj": {"a": "y", "c": i}, "added": True}
        send("json", to_json(doc, context("json")))
        order = order_v2(id=i, title=f"t{i}", added=i)
        order.lines.add(sku=f"k{i}")
        send("proto", serialize(client, topics["proto"], order))
    assert producer.flush(30) == 0

    plan = PlanTask(project, project.tables).run()
    assert not plan.blockers, plan.blockers
    assert changes_of(plan, "avro_t") == {
        ("widen_type", "id"),
        ("widen_type", "price"),
        ("add_column", "address.street"),
        ("add_column", "extra"),
        ("keep_column", "legacy"),
        ("keep_column", "address.old_zip"),
    }
    assert changes_of(plan, "json_t") == {
        ("widen_type", "amount"),
        ("add_column", "obj.c"),
        ("add_column", "added"),
        ("keep_column", "gone"),
        ("keep_column", "obj.b"),
    }
    # A Protobuf rename keeps the field number, but the table follows names: the new name
    # is a new column and the old one is kept with its rows (nothing is lost).
    assert changes_of(plan, "proto_t") == {
        ("add_column", "title"),
        ("add_column", "added"),
        ("add_column", "lines"),
        ("keep_column", "name"),
        ("keep_column", "old"),
    }
    (legacy,) = [
        c for a in plan.actions if a.table == "avro_t" and a.kind == "evolve_schema"
        for c in a.changes if c.path == "legacy"
    ]  # fmt: skip
    assert legacy.detail == "not in the topic's schema any more: kept (optional); new rows get null"
    second = ApplyTask(project, plan, spark=spark).run()
    assert second.status == "success", [r.error for r in second.tables]

    catalog = catalog_server.pyiceberg_catalog()
    for got in rows(
        catalog,
        f"{namespace}.avro_t",
        "id, price, legacy, name, color, address.city, address.old_zip, address.street, extra",
    ):
        assert got == [
            *[(i, 0.5 + i, f"L{i}", f"n{i}", "GREEN", "Oslo", f"0{i}", None, None) for i in range(3)],
            *[(2**40 + i, 1e300, None, f"n{i}", "BLUE", "Rome", None, f"s{i}", f"e{i}") for i in range(3, 6)],
        ]  # fmt: skip
    for got in rows(catalog, f"{namespace}.json_t", "id, amount, gone, obj.a, obj.b, obj.c, added"):
        assert got == [
            *[(i, Decimal("1234567.25"), f"g{i}", "x", f"b{i}", None, None) for i in range(3)],
            *[(i, Decimal("1234567890.75"), None, "y", None, i, True) for i in range(3, 6)],
        ]
    for got in rows(catalog, f"{namespace}.proto_t", "id, name, old, title, added, lines"):
        assert got == [
            *[(i, f"n{i}", "o", None, None, None) for i in range(3)],
            *[(i, None, None, f"t{i}", i, [{"sku": f"k{i}"}]) for i in range(3, 6)],
        ]
    table_types = {
        f.name: (str(f.field_type), f.required)
        for f in catalog.load_table(f"{namespace}.avro_t").schema().fields
    }
    assert table_types["id"] == ("long", False) and table_types["price"] == ("double", False)
    assert table_types["legacy"] == ("string", False)
    amount = catalog.load_table(f"{namespace}.json_t").schema().find_field("amount")
    assert str(amount.field_type) == "decimal(12, 2)"
    converged = PlanTask(project, project.tables).run()
    assert not converged.has_changes, [a.id for a in converged.actions]

    # Later runs keep working; a record of another Protobuf message is a bad record.
    send("avro", to_avro({**record, "id": 99}, context("avro")))
    send("proto", serialize(client, topics["proto"], helper_v2(note="not an order")))
    assert producer.flush(30) == 0
    proto_snapshot = catalog.load_table(f"{namespace}.proto_t").metadata.current_snapshot_id
    third = ApplyTask(project, PlanTask(project, project.tables).run(), spark=spark).run()
    by_table = {r.table: r for r in third.tables}
    assert by_table["avro_t"].status == "success" and by_table["avro_t"].records_written == 1
    assert by_table["proto_t"].status == "error"
    error = by_table["proto_t"].error or ""
    assert f"topic {topics['proto']!r} partition 0 offset 6" in error, error
    assert f"{package}.Helper" in error and f"the table holds '{package}.Order'" in error
    proto_table = catalog.load_table(f"{namespace}.proto_t")
    assert proto_table.metadata.current_snapshot_id == proto_snapshot  # nothing committed

    # v3: long -> double is a promotion Avro (and so the registry) allows; Iceberg cannot
    # follow it in place. Plan blocks, naming the column, and apply refuses.
    AvroSerializer(client, json.dumps(avro(3)))({**record, "id": 1.5}, context("avro"))
    avro_snapshot = catalog.load_table(f"{namespace}.avro_t").metadata.current_snapshot_id
    blocked = PlanTask(project, (project.table("avro_t"),)).run()
    [blocker] = blocked.blockers
    assert blocker.kind == "destructive"
    assert "column id: type long cannot change to double in place" in blocker.message
    with pytest.raises(PlanNotApplicableError, match="cannot change to double"):
        ApplyTask(project, blocked, spark=spark).run()
    after = catalog.load_table(f"{namespace}.avro_t")
    assert after.metadata.current_snapshot_id == avro_snapshot
    assert str(after.schema().find_field("id").field_type) == "long"
