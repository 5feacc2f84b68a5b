"""The poison matrix through `tableflow plan` + `apply`: JSON Schema, Protobuf, plain JSON.

One topic per format (produced with confluent-kafka's real serializers against the test
registry) holds every kind of bad record at known offsets: wrong magic byte, unknown
schema id, truncated or undecodable payload, and a value that does not fit the table
(written with an incompatible schema registered under another subject). Each policy
(fail, skip) and each dead-letter target (Iceberg table, Kafka topic) runs one apply
over it. Every offset must land in exactly one place: a table row (by `_kafka_partition`,
`_kafka_offset`, read back by DuckDB), a dead-letter row (by source partition and offset,
read back by pyiceberg or a Kafka consumer) or the skipped count, and the accounting adds
up per partition in run_results.json and in the published snapshot's summary.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from rich.console import Console

from tableflow_core.deadletter.accounting import RunAccounting
from tableflow_core.deadletter.topics import topic_partitions
from tableflow_core.plan.render_human import render_human
from tableflow_core.readers.duckdb_reader import duckdb_connection
from tableflow_core.runner.results import TableResult
from tableflow_core.state.offsets import OFFSETS_KEY
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.apply_env import Env, apply
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.dead_letters import read_dead_letters
from tests.fixtures.poison import FRAMING_POISON, framing_poison
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name

pytestmark = pytest.mark.slow

# partition -> the kind of record at each offset
LAYOUT: dict[str, dict[int, list[str]]] = {
    "json_schema": {
        0: ["good", "magic", "good", "truncated", "good", "misfit", "good"],
        1: ["unknown_id", "good", "good", "misfit", "good"],
    },
    "protobuf": {
        0: ["good", "magic", "good", "truncated", "good", "misfit", "good"],
        1: ["unknown_id", "good", "bad_index", "good"],
    },
    "json": {
        0: ["good", "framed", "good", "truncated", "good", "misfit", "good"],
        1: ["not_utf8", "good", "good", "array", "good"],
    },
}
# What the error message of each kind of bad record must say.
REASONS = {
    "magic": "magic byte",
    "unknown_id": "unknown schema id",
    "truncated": "",  # per format below
    "misfit": "",
    "bad_index": "",
    "framed": "invalid JSON",
    "not_utf8": "invalid JSON",
    "array": "",
}
FORMAT_REASONS = {
    ("json_schema", "truncated"): "invalid JSON payload",
    ("json_schema", "misfit"): "does not fit the table schema",
    ("protobuf", "truncated"): "corrupt or truncated Protobuf payload",
    ("protobuf", "misfit"): "the table holds",
    ("protobuf", "bad_index"): "schema id",
    ("json", "truncated"): "invalid JSON",
    ("json", "misfit"): "does not fit the table schema",
    ("json", "array"): "JSON value is an array, not an object",
}


def value_id(partition: int, offset: int) -> int:
    return partition * 100 + offset


# ---------------------------------------------------------------- serializers per format

JSON_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Payment",
    "type": "object",
    "properties": {"id": {"type": "integer"}, "amount": {"type": "number"}},
    "required": ["id", "amount"],
}
# An incompatible writer: `id` is a string (registered under another subject).
JSON_SCHEMA_MISFIT = {
    **JSON_SCHEMA,
    "properties": {**JSON_SCHEMA["properties"], "id": {"type": "string"}},
}


def _json_schema_values(registry: SchemaRegistryClient, topic: str) -> Callable[[str, int], bytes]:
    serialize = JSONSerializer(json.dumps(JSON_SCHEMA), registry)
    misfit = JSONSerializer(json.dumps(JSON_SCHEMA_MISFIT), registry)
    other = unique_name("other")

    def value(kind: str, i: int) -> bytes:
        good = serialize(
            {"id": i, "amount": 1.5 * i}, SerializationContext(topic, MessageField.VALUE)
        )
        assert good is not None
        if kind == "misfit":
            bad = misfit(
                {"id": f"x{i}", "amount": 1.0}, SerializationContext(other, MessageField.VALUE)
            )
            assert bad is not None
            return bad
        return _framing_poison(kind, good)

    return value


def _message_class(name: str, fields: list[tuple[str, int, int]]) -> type:
    """A protobuf message class built at runtime from a descriptor (no protoc needed)."""
    file_proto = descriptor_pb2.FileDescriptorProto(
        name=f"{unique_name(name.lower())}.proto", package="poisontest", syntax="proto3"
    )
    message = file_proto.message_type.add(name=name)
    label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    for field_name, number, kind in fields:
        message.field.add(name=field_name, number=number, type=kind, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"poisontest.{name}"))


def _protobuf_values(registry: SchemaRegistryClient, topic: str) -> Callable[[str, int], bytes]:
    types = descriptor_pb2.FieldDescriptorProto
    payment = _message_class(
        "Payment",
        [
            ("id", 1, types.TYPE_INT64),
            ("amount", 2, types.TYPE_DOUBLE),
            ("note", 3, types.TYPE_STRING),
        ],
    )
    refund = _message_class("Refund", [("reason", 1, types.TYPE_STRING)])
    conf = {"use.deprecated.format": False}
    serialize = ProtobufSerializer(payment, registry, conf)
    misfit = ProtobufSerializer(refund, registry, conf)
    other = unique_name("other")

    def value(kind: str, i: int) -> bytes:
        message = payment(id=i, amount=1.5 * i, note=f"payment number {i}")
        good = serialize(message, SerializationContext(topic, MessageField.VALUE))
        assert good is not None and good[5] == 0  # message-index shorthand: first message
        if kind == "misfit":  # a Refund on a Payment topic
            bad = misfit(refund(reason="late"), SerializationContext(other, MessageField.VALUE))
            assert bad is not None
            return bad
        if kind == "bad_index":  # message index [5]: the schema has one message
            return good[:5] + b"\x02\x0a" + good[6:]
        if kind == "truncated":  # cut inside the last string field
            return good[:-3]
        return _framing_poison(kind, good)

    return value


def _plain_json_values(registry: SchemaRegistryClient, topic: str) -> Callable[[str, int], bytes]:
    def value(kind: str, i: int) -> bytes:
        good = json.dumps({"id": i, "amount": 1.5 * i}).encode()
        return {
            "good": good,
            "framed": b"\x00\x00\x00\x00\x01" + good,  # a registry-framed record on a JSON topic
            "truncated": good[:-4],
            "misfit": json.dumps({"id": f"x{i}", "amount": 1.0}).encode(),
            "not_utf8": b"\xff\xfe" + good,
            "array": json.dumps([i, 1.5 * i]).encode(),
        }[kind]

    return value


def _framing_poison(kind: str, good: bytes) -> bytes:
    assert kind in (*FRAMING_POISON, "good"), kind
    return framing_poison(kind, good)


SERIALIZERS = {
    "json_schema": _json_schema_values,
    "protobuf": _protobuf_values,
    "json": _plain_json_values,
}
VALUE_CONFIG: dict[str, dict[str, Any]] = {
    "json_schema": {"format": "json_schema"},
    "protobuf": {"format": "protobuf"},
    "json": {
        "format": "json",
        "columns": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
    },
}


@dataclass(frozen=True)
class Poison:
    format: str
    topic: str
    values: dict[tuple[int, int], bytes]

    @property
    def layout(self) -> dict[int, list[str]]:
        return LAYOUT[self.format]

    def offsets(self, good: bool) -> set[tuple[int, int]]:
        return {
            (p, o)
            for p, kinds in self.layout.items()
            for o, kind in enumerate(kinds)
            if (kind == "good") == good
        }

    def kind(self, partition: int, offset: int) -> str:
        return self.layout[partition][offset]


def produce_poison(fmt: str, broker: KafkaBroker, registry: SchemaRegistryServer) -> Poison:
    layout = LAYOUT[fmt]
    topic = broker.create_topic(unique_name(f"poison_{fmt}"), len(layout))
    value = SERIALIZERS[fmt](registry.client(), topic)
    producer = Producer(broker.producer_config())
    values: dict[tuple[int, int], bytes] = {}
    for partition, kinds in layout.items():
        for offset, kind in enumerate(kinds):
            i = value_id(partition, offset)
            values[(partition, offset)] = value(kind, i)
            producer.produce(
                topic, values[(partition, offset)], f"k{i}".encode(), partition=partition
            )
    assert producer.flush(10) == 0
    return Poison(fmt, topic, values)


_TOPICS: dict[str, Poison] = {}


@pytest.fixture(params=sorted(LAYOUT))
def poison(
    request: Any, kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer
) -> Poison:
    """One poison topic per format for the whole module (each apply reads it from 0)."""
    fmt = request.param
    if fmt not in _TOPICS:
        _TOPICS[fmt] = produce_poison(fmt, kafka_broker, schema_registry)
    return _TOPICS[fmt]


# ---------------------------------------------------------------- reading back


def table_positions(env: Env) -> dict[tuple[int, int], tuple[int, float]]:
    """(partition, offset) -> (id, amount) of every table row, read by DuckDB."""
    location = env.pyiceberg_table().metadata_location
    rows = (
        duckdb_connection()
        .sql(f"SELECT _kafka_partition, _kafka_offset, id, amount FROM iceberg_scan('{location}')")
        .fetchall()
    )
    positions = {(int(p), int(o)): (int(i), float(a)) for p, o, i, a in rows}
    assert len(positions) == len(rows), "an offset landed twice in the table"
    return positions


def dlq_table_rows(env: Env, identifier: str) -> list[dict[str, Any]]:
    rows = env.catalog.pyiceberg_catalog().load_table(identifier).scan().to_arrow().to_pylist()
    return sorted(rows, key=lambda r: (r["source_partition"], r["source_offset"]))


def dlq_topic_rows(broker: KafkaBroker, topic: str, expected: int) -> list[dict[str, Any]]:
    """The dead-letter topic's records as dicts shaped like the Iceberg DLQ rows."""
    return [asdict(letter) for letter in read_dead_letters(broker, topic, expected)]


def assert_written_rows(env: Env, poison: Poison) -> None:
    positions = table_positions(env)
    assert set(positions) == poison.offsets(good=True)
    for (p, o), (i, amount) in positions.items():
        assert (i, amount) == (value_id(p, o), 1.5 * value_id(p, o))


def assert_dead_letter_rows(rows: list[dict[str, Any]], poison: Poison) -> None:
    where = [(r["source_partition"], r["source_offset"]) for r in rows]
    assert len(where) == len(set(where)), "an offset was dead-lettered twice"
    assert set(where) == poison.offsets(good=False)
    for row in rows:
        p, o = row["source_partition"], row["source_offset"]
        kind = poison.kind(p, o)
        assert row["source_topic"] == poison.topic and row["stage"] == "decode"
        assert row["value"] == poison.values[(p, o)]  # the original bytes, untouched
        assert row["key"] == f"k{value_id(p, o)}".encode()
        reason = FORMAT_REASONS.get((poison.format, kind)) or REASONS[kind]
        assert reason in row["error_message"], (kind, row["error_message"])


def assert_accounting(env: Env, result: TableResult, poison: Poison, outcome: str) -> None:
    """Per partition: read = written + outcome; the same in run_results.json and the
    published snapshot (which also carries the offsets)."""
    on_disk = json.loads((env.root / "target" / "run_results.json").read_text())
    (table,) = on_disk["tables"]
    accounting = table["accounting"]
    assert accounting == result.accounting
    by_partition = {p["partition"]: p for p in accounting["partitions"]}
    assert set(by_partition) == set(poison.layout)
    for partition, kinds in poison.layout.items():
        bad = sum(k != "good" for k in kinds)
        figures = by_partition[partition]
        expected = {"read": len(kinds), "written": len(kinds) - bad, "filtered": 0}
        expected |= {"skipped": 0, "dead_lettered": 0, "tombstones": 0, outcome: bad}
        assert {k: figures[k] for k in expected} == expected, (partition, figures)
    snapshot = env.pyiceberg_table().current_snapshot()
    assert snapshot is not None
    summary = snapshot.summary.additional_properties
    stored = RunAccounting.from_snapshot_summary(summary, "t")
    assert stored is not None and stored.to_json()["partitions"] == accounting["partitions"]
    assert OFFSETS_KEY in summary
    assert result.offsets_after == {p: len(k) for p, k in poison.layout.items()}


def plan_text(env: Env) -> str:
    """`tableflow plan` as the terminal shows it (in process)."""
    project = env.project
    console = Console(record=True, width=200)
    render_human(PlanTask(project, project.tables).run(), console)
    return console.export_text()


def make_poison_env(make_env: Any, poison: Poison, **table: Any) -> Env:
    return make_env(
        poison.topic,
        value=VALUE_CONFIG[poison.format],
        metadata_columns=["partition", "offset"],
        **table,
    )


# ---------------------------------------------------------------- one apply per policy/target


def test_fail_commits_nothing_and_names_the_first_offset(
    spark: Any, make_env: Any, poison: Poison
) -> None:
    env = make_poison_env(make_env, poison, on_error="fail")
    result = apply(spark, env, expect="error")
    assert result.error is not None
    first = min(poison.offsets(good=False))
    assert f"partition {first[0]} offset {first[1]}" in result.error, result.error
    assert poison.topic in result.error
    assert env.pyiceberg_table().scan().to_arrow().num_rows == 0
    snapshot = env.pyiceberg_table().current_snapshot()
    assert snapshot is None or OFFSETS_KEY not in snapshot.summary.additional_properties


def test_skip_writes_every_good_offset_and_counts_the_bad(
    spark: Any, make_env: Any, poison: Poison
) -> None:
    env = make_poison_env(make_env, poison, on_error="skip")
    result = apply(spark, env)
    assert_written_rows(env, poison)
    assert_accounting(env, result, poison, "skipped")


def test_dlq_iceberg_table_holds_every_bad_offset_once(
    spark: Any, make_env: Any, poison: Poison
) -> None:
    identifier = f"{unique_namespace('dlq')}.bad_{poison.format}"
    env = make_poison_env(
        make_env, poison, on_error="dlq", dlq={"type": "iceberg", "table": identifier}
    )
    result = apply(spark, env)
    assert_written_rows(env, poison)
    rows = dlq_table_rows(env, identifier)
    assert_dead_letter_rows(rows, poison)
    assert result.accounting is not None
    assert {r["run_id"] for r in rows} == {result.accounting["run_id"]}
    assert_accounting(env, result, poison, "dead_lettered")


def test_dlq_kafka_topic_holds_every_bad_offset_once(
    spark: Any, make_env: Any, poison: Poison, kafka_broker: KafkaBroker
) -> None:
    """The dead-letter topic does not exist: plan shows it, apply creates it with as many
    partitions as the source topic, then routes every bad record to it."""
    dlq_topic = unique_name(f"dlq_{poison.format}")
    env = make_poison_env(
        make_env, poison, on_error="dlq", dlq={"type": "kafka", "topic": dlq_topic}
    )
    conf = {"bootstrap.servers": kafka_broker.bootstrap}
    assert topic_partitions(conf, dlq_topic, 10) is None
    planned = plan_text(env)
    assert f"+ dead-letter topic {dlq_topic}" in planned
    assert f"{len(poison.layout)} partitions (like topic {poison.topic})" in planned

    result = apply(spark, env)
    assert topic_partitions(conf, dlq_topic, 10) == len(poison.layout)
    assert_written_rows(env, poison)
    bad = poison.offsets(good=False)
    assert_dead_letter_rows(dlq_topic_rows(kafka_broker, dlq_topic, len(bad)), poison)
    assert_accounting(env, result, poison, "dead_lettered")
    assert "dead-letter topic" not in plan_text(env)  # created once: nothing left to create
