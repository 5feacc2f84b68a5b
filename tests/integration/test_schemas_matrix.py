"""Every type of every format, end to end: confluent-kafka's serializers -> the real broker
and dev registry -> `tableflow apply` (Spark + Iceberg) -> read back by pyiceberg AND
DuckDB, compared value by value; then `plan` converges (no changes).

One apply for all formats (six tables, concurrent in one Spark application) keeps the
test lean. The Protobuf tables cover a file of every construct, every other scalar and
wrapper type, and a schema with a helper message declared first, the records' message
second, a nested type and an import (a registry reference).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, message_factory, struct_pb2, wrappers_pb2
from google.protobuf.descriptor_pool import DescriptorPool

from tableflow_core.config.loader import load_project
from tableflow_core.readers.duckdb_reader import duckdb_connection
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.plan import PlanTask
from tests.avro_records import avro_record, nullable, with_default
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.stack import unique_name
from tests.json_schemas import json_object
from tests.unit.test_schemas_protobuf import build_file, full_order
from tests.unit.test_schemas_protobuf_messages import an_order, serialize, shop_messages

pytestmark = pytest.mark.slow

UTC = dt.UTC
F = descriptor_pb2.FieldDescriptorProto
T0 = dt.datetime(2026, 11, 1, 10, 11, 12, 345678, tzinfo=UTC)
LOCAL = dt.datetime(2026, 11, 1, 23, 59, 58, 123456)  # wall clock, no zone
NANOS = 1_700_000_000_123_456_789
U1, U2 = uuid.UUID(int=1), uuid.UUID(int=2)

AVRO_SCHEMA = avro_record(
    "Everything",
    namespace="matrix",
    id="int", b="boolean", l="long", f="float", d="double", s="string", by="bytes",
    dec={"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
    decf={"type": "fixed", "name": "DecF", "size": 8, "logicalType": "decimal", "precision": 12, "scale": 3},
    wide={"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2},
    day={"type": "int", "logicalType": "date"},
    tm={"type": "int", "logicalType": "time-millis"},
    tu={"type": "long", "logicalType": "time-micros"},
    tsm={"type": "long", "logicalType": "timestamp-millis"},
    tsu={"type": "long", "logicalType": "timestamp-micros"},
    tsn={"type": "long", "logicalType": "timestamp-nanos"},
    ltsm={"type": "long", "logicalType": "local-timestamp-millis"},
    ltsu={"type": "long", "logicalType": "local-timestamp-micros"},
    ltsn={"type": "long", "logicalType": "local-timestamp-nanos"},
    u={"type": "string", "logicalType": "uuid"},
    e={"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]},
    fx={"type": "fixed", "name": "Four", "size": 4},
    arr={"type": "array", "items": "int"},
    mp={"type": "map", "values": "long"},
    rec=avro_record(
        "Inner", x="int", when=["null", {"type": "long", "logicalType": "local-timestamp-micros"}]
    ),
    opt=nullable("string"),
    num=["int", "long"],
    multi=with_default(["null", "string", "long"], None),
    nothing="null",
)  # fmt: skip


def _micros_of_day(t: dt.time) -> int:
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


def avro_cases() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(record as produced, row as the table must hold it)."""
    cases = []
    for i in range(3):
        at = T0 + dt.timedelta(days=i)
        local = LOCAL + dt.timedelta(hours=i)
        record = {
            "id": i, "b": i % 2 == 0, "l": 2**40 + i, "f": 1.25 + i, "d": 0.1 * i,
            "s": f"text-{i}", "by": bytes([i, 255]), "dec": Decimal(f"{i}1234.56"),
            "decf": Decimal(f"-{i}12345678.901"), "wide": Decimal(f"{10**37 + i}.25"),
            "day": dt.date(2026, 1, 1 + i), "tm": dt.time(10, 11, 12, 345000),
            "tu": dt.time(23, 59, 59, 999999), "tsm": at.replace(microsecond=345000),
            "tsu": at, "tsn": NANOS + i, "ltsm": local.replace(microsecond=123000),
            "ltsu": local, "ltsn": NANOS + i, "u": str(U1 if i else U2),
            "e": ["RED", "GREEN"][i % 2], "fx": b"ab" + bytes([i, i]), "arr": list(range(i)),
            "mp": {f"k{j}": j for j in range(i)},
            "rec": {"x": -i, "when": None if i == 2 else local},
            "opt": None if i == 2 else f"o{i}", "num": 2**33 * i,
            "multi": [f"m{i}", 7 * i, None][i], "nothing": None,
        }  # fmt: skip
        row = {
            **record,
            "wide": f"{10**37 + i}.25",  # beyond Iceberg's 38 digits: exact text
            "tm": _micros_of_day(record["tm"]),  # micros since midnight
            "tu": _micros_of_day(record["tu"]),
            "tsn": dt.datetime.fromtimestamp((NANOS + i) // 1000 / 1e6, UTC),
            "ltsn": dt.datetime.fromtimestamp((NANOS + i) // 1000 / 1e6, UTC).replace(tzinfo=None),
            "multi": [
                {"member0": "m0", "member1": None},
                {"member0": None, "member1": 7},
                None,
            ][i],
        }
        cases.append((record, row))
    return cases


JSON_SCHEMA = json_object(
    "Everything",
    id="integer",
    n="number",
    dec={"type": "number", "connect.type": "bytes", "precision": 9, "scale": 2},
    flag="boolean",
    s="string",
    color={"type": "string", "enum": ["RED", "GREEN"]},
    at={"type": "string", "format": "date-time"},
    day={"type": "string", "format": "date"},
    u={"type": "string", "format": "uuid"},
    nums={"type": "array", "items": {"type": "integer"}},
    obj={"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "string"}}},
    counts={"type": "object", "additionalProperties": {"type": "integer"}},
    free="object",
    maybe={"type": ["string", "null"]},
    either={"type": ["string", "integer"]},
    required=["id"],
)


def json_schema_cases() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    cases = []
    for i in range(3):
        record = {
            "id": i, "n": 0.5 + i, "dec": float(f"{i}1234.56"), "flag": i == 1,
            "s": f"s{i}", "color": ["RED", "GREEN"][i % 2],
            "at": f"2026-11-0{i + 1}T12:00:00.123456+02:00", "day": f"2026-02-0{i + 1}",
            "u": str(U1), "nums": [i, i + 1], "obj": {"x": i, "y": f"y{i}"},
            "counts": {"a": i}, "free": {"z": [1, {"q": i}], "a": None},
            "maybe": None if i == 2 else "m", "either": ["e", 5, "f"][i],
        }  # fmt: skip
        row = {
            **record,
            "dec": Decimal(f"{i}1234.56"),
            "at": dt.datetime(2026, 11, 1 + i, 10, 0, 0, 123456, tzinfo=UTC),
            "day": dt.date(2026, 2, 1 + i),
            "free": json.dumps(record["free"], separators=(",", ":"), sort_keys=True),
            "either": ["e", "5", "f"][i],  # several types: the value as JSON text
        }
        cases.append((record, row))
    return cases


PLAIN_COLUMNS = [
    {"name": "id", "type": "long"},
    {"name": "s", "type": "string"},
    {"name": "i", "type": "int"},
    {"name": "f", "type": "float"},
    {"name": "d", "type": "double"},
    {"name": "b", "type": "boolean"},
    {"name": "day", "type": "date"},
    {"name": "ts", "type": "timestamp"},
    {"name": "tstz", "type": "timestamptz"},
    {"name": "dec", "type": "decimal(10,2)"},
    {"name": "bin", "type": "binary"},
    {"name": "doc", "type": "json"},
    {"name": "deep", "type": "long", "path": "a.b"},
]


def plain_json_cases() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    cases = []
    for i in range(3):
        record = {
            "id": i, "s": 12 if i == 1 else f"s{i}", "i": -i, "f": 0.25 * i, "d": 1e100 * i,
            "b": i != 1, "day": f"2025-12-{28 + i}", "ts": f"2026-01-01T00:00:0{i}.5",
            "tstz": f"2026-01-01T00:00:0{i}+01:00", "dec": f"{i}.5", "bin": "AAEC",
            "doc": {"k": [i]}, "a": {"b": 10 * i},
        }  # fmt: skip
        row = {
            **{k: v for k, v in record.items() if k != "a"},
            "s": "12" if i == 1 else f"s{i}",
            "day": dt.date(2025, 12, 28 + i),
            "ts": dt.datetime(2026, 1, 1, 0, 0, i, 500000),
            "tstz": dt.datetime(2025, 12, 31, 23, 0, i, tzinfo=UTC),
            "dec": Decimal(f"{i}.50"),
            "bin": b"\x00\x01\x02",
            "doc": json.dumps({"k": [i]}, separators=(",", ":")),
            "deep": 10 * i,
        }
        cases.append((record, row))
    return cases


def proto_all_cases(order_cls: Any) -> list[tuple[Any, dict[str, Any]]]:
    sparse = order_cls(id=2, cash=5)
    full_row = {
        "id": 1, "price": 2.5, "ratio": 0.5, "small": -3, "count": 4_000_000_000,
        "big": Decimal(2**64 - 1), "ok": True, "name": "n", "blob": b"\x01",
        "status": "SHIPPED", "items": [{"sku": "s1", "qty": 2}], "attrs": {"k": 9},
        "created": dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC), "ttl": 90_000_000,
        "discount": 0.25, "extra": '{"a": "x", "b": 1.0}', "card": "visa", "cash": None,
        "note": "hello", "main_item": None, "tags": ["a"],
    }  # fmt: skip
    sparse_row = {
        **{k: None for k in full_row},
        # proto3 scalars without presence read as their defaults
        "id": 2, "price": 0.0, "ratio": 0.0, "small": 0, "count": 0, "big": Decimal(0),
        "ok": False, "name": "", "blob": b"", "status": "UNKNOWN", "items": [], "attrs": {},
        "tags": [], "cash": 5,
    }  # fmt: skip
    return [(full_order(order_cls), full_row), (sparse, sparse_row)]


# The scalar types and wrappers the `build_file` message does not have.
PROTO_SCALARS = {
    "i32": (F.TYPE_INT32, "", -7),
    "s64": (F.TYPE_SINT64, "", -(2**62)),
    "sf32": (F.TYPE_SFIXED32, "", -5),
    "sf64": (F.TYPE_SFIXED64, "", -(2**63)),
    "f32": (F.TYPE_FIXED32, "", 2**32 - 1),
    "f64": (F.TYPE_FIXED64, "", 2**64 - 2),
    "w_i32": (F.TYPE_MESSAGE, "Int32Value", -1),
    "w_i64": (F.TYPE_MESSAGE, "Int64Value", 2**63 - 1),
    "w_u32": (F.TYPE_MESSAGE, "UInt32Value", 2**32 - 1),
    "w_u64": (F.TYPE_MESSAGE, "UInt64Value", 2**64 - 1),
    "w_f": (F.TYPE_MESSAGE, "FloatValue", 0.75),
    "w_b": (F.TYPE_MESSAGE, "BoolValue", False),
    "w_s": (F.TYPE_MESSAGE, "StringValue", "wrapped"),
    "w_by": (F.TYPE_MESSAGE, "BytesValue", b"\x00w"),
    "js_v": (F.TYPE_MESSAGE, "Value", None),
    "js_l": (F.TYPE_MESSAGE, "ListValue", None),
}


def proto_scalars_cases() -> list[tuple[Any, dict[str, Any]]]:
    package = f"scalars{uuid.uuid4().hex[:8]}"
    file = descriptor_pb2.FileDescriptorProto(
        name=f"{package}.proto", package=package, syntax="proto3"
    )
    file.dependency.extend(["google/protobuf/wrappers.proto", "google/protobuf/struct.proto"])
    message = file.message_type.add(name="Scalars")
    message.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    for number, (name, (ftype, wrapper, _)) in enumerate(PROTO_SCALARS.items(), start=2):
        field = message.field.add(name=name, number=number, type=ftype, label=F.LABEL_OPTIONAL)
        if wrapper:
            field.type_name = f".google.protobuf.{wrapper}"
    pool = DescriptorPool()
    for dependency in (wrappers_pb2, struct_pb2):
        pool.AddSerializedFile(dependency.DESCRIPTOR.serialized_pb)
    pool.Add(file)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Scalars"))
    full = cls(id=1)
    row: dict[str, Any] = {"id": 1}
    for name, (_, wrapper, value) in PROTO_SCALARS.items():
        if not wrapper:
            setattr(full, name, value)
            row[name] = Decimal(value) if name == "f64" else value
        elif value is not None:
            getattr(full, name).value = value
            row[name] = Decimal(value) if name == "w_u64" else value
    full.js_v.string_value = "v"
    full.js_l.values.add().number_value = 2
    row.update(js_v='"v"', js_l="[2.0]")
    empty_row = {name: None for name in row} | {
        "id": 2, "i32": 0, "s64": 0, "sf32": 0, "sf64": 0, "f32": 0, "f64": Decimal(0),
    }  # fmt: skip
    return [(full, row), (cls(id=2), empty_row)]


def normalize(value: Any) -> Any:
    """One representation for both readers: maps as dicts, instants in UTC.

    (An empty map reads as `[]` from pyiceberg, `{}` from DuckDB: both become `[]`.)
    """
    if isinstance(value, dict) and not value:
        return []
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {k: normalize(v) for k, v in value}  # pyiceberg's map entries
        return [normalize(v) for v in value]
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    return value


def read_back(catalog: Any, identifier: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows by pyiceberg, rows by DuckDB), ordered by `id`."""
    table = catalog.load_table(identifier)
    by_pyiceberg = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    relation = duckdb_connection().sql(
        f"SELECT * FROM iceberg_scan('{table.metadata_location}') ORDER BY id"
    )
    by_duckdb = [dict(zip(relation.columns, r, strict=True)) for r in relation.fetchall()]
    return [normalize(r) for r in by_pyiceberg], [normalize(r) for r in by_duckdb]


def produce(
    producer: Producer, topic: str, values: list[Any], serialize: Callable[[Any], bytes]
) -> None:
    for value in values:
        producer.produce(topic, value=serialize(value))


def test_every_type_of_every_format_lands_right_and_plan_converges(
    stack_project, kafka_broker, schema_registry, catalog_server, spark
) -> None:
    client = schema_registry.client()
    topics = {
        name: unique_name(f"matrix_{name}")
        for name in ("avro", "json_schema", "plain", "proto_all", "proto_shop", "proto_scalars")
    }
    kafka_broker.create_topics({t: 1 for t in topics.values()})
    producer = Producer(kafka_broker.producer_config())

    def context(name: str) -> SerializationContext:
        return SerializationContext(topics[name], MessageField.VALUE)

    def produce_protobuf(name: str, messages: list[Any]) -> None:
        produce(producer, topics[name], messages, lambda m: serialize(client, topics[name], m))

    avro = avro_cases()
    to_avro = AvroSerializer(client, json.dumps(AVRO_SCHEMA))
    produce(producer, topics["avro"], [r for r, _ in avro], lambda v: to_avro(v, context("avro")))
    json_cases = json_schema_cases()
    to_json = JSONSerializer(json.dumps(JSON_SCHEMA), client)
    produce(
        producer,
        topics["json_schema"],
        [r for r, _ in json_cases],
        lambda v: to_json(v, context("json_schema")),
    )
    plain = plain_json_cases()
    produce(producer, topics["plain"], [r for r, _ in plain], lambda v: json.dumps(v).encode())
    order_cls = build_file(f"matrix{uuid.uuid4().hex[:8]}")
    proto_all = proto_all_cases(order_cls)
    produce_protobuf("proto_all", [m for m, _ in proto_all])
    proto_scalars = proto_scalars_cases()
    produce_protobuf("proto_scalars", [m for m, _ in proto_scalars])
    shop = shop_messages()
    orders = [an_order(shop, i) for i in range(3)]
    produce_protobuf("proto_shop", orders)
    assert producer.flush(30) == 0

    namespace = unique_namespace("matrix")
    tables = [
        {"name": "avro", "topic": topics["avro"], "value": {"format": "avro"}},
        {"name": "json_schema", "topic": topics["json_schema"], "value": {"format": "json_schema"}},
        {
            "name": "plain",
            "topic": topics["plain"],
            "value": {"format": "json", "columns": PLAIN_COLUMNS},
        },
        {"name": "proto_all", "topic": topics["proto_all"], "value": {"format": "protobuf"}},
        {
            "name": "proto_scalars",
            "topic": topics["proto_scalars"],
            "value": {"format": "protobuf"},
        },
        {
            "name": "proto_shop",
            "topic": topics["proto_shop"],
            "value": {"format": "protobuf", "message": "Order"},
        },
    ]

    # Without `message:`, a schema with two top-level messages is refused at plan time,
    # pointing at the table's `value:` key, before anything is created.
    ambiguous = stack_project(
        namespace=namespace,
        name="ambiguous",
        tables=[{**tables[-1], "value": {"format": "protobuf"}}],
    )
    project = load_project(ambiguous)
    [blocker] = PlanTask(project, project.tables).run().blockers
    assert "2 top-level messages" in blocker.message and "`message:`" in blocker.message
    table = project.tables[0]
    assert blocker.location == f"{table.source.file}:{table.key_lines['value']}"

    project = load_project(stack_project(namespace=namespace, tables=tables))
    plan = PlanTask(project, project.tables).run()
    assert not plan.blockers, plan.blockers
    results = ApplyTask(project, plan, spark=spark).run()
    assert results.status == "success", [r.error for r in results.tables]

    catalog = catalog_server.pyiceberg_catalog()
    expected = {
        "avro": [row for _, row in avro],
        "json_schema": [row for _, row in json_cases],
        "plain": [row for _, row in plain],
        "proto_all": [row for _, row in proto_all],
        "proto_scalars": [row for _, row in proto_scalars],
        "proto_shop": [
            {
                "id": i,
                "total": {"units": 100 * i, "currency": "EUR"},
                "lines": [{"sku": f"s{i}", "qty": i}],
                "at": dt.datetime.fromtimestamp(1_700_000_000 + i, UTC),
                "status": ["NEW", "PAID"][i % 2],
            }
            for i in range(3)
        ],
    }
    for name, rows in expected.items():
        by_pyiceberg, by_duckdb = read_back(catalog, f"{namespace}.{name}")
        want = [normalize(r) for r in rows]
        for got in (by_pyiceberg, by_duckdb):
            assert len(got) == len(want), name
            for got_row, want_row in zip(got, want, strict=True):
                assert got_row == want_row, (name, got_row, want_row)

    types = {
        f.name: str(f.field_type) for f in catalog.load_table(f"{namespace}.avro").schema().fields
    }
    assert types["ltsm"] == types["ltsu"] == types["ltsn"] == "timestamp"
    assert types["tsm"] == types["tsu"] == types["tsn"] == "timestamptz"
    assert types["rec"].endswith("when: optional timestamp>"), types["rec"]
    plain_types = {
        f.name: str(f.field_type) for f in catalog.load_table(f"{namespace}.plain").schema().fields
    }
    assert plain_types["ts"] == "timestamp" and plain_types["tstz"] == "timestamptz"

    again = PlanTask(project, project.tables).run()
    assert not again.has_changes, [a.id for a in again.actions]
