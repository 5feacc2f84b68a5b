"""Upsert tables with `on_error: skip` and `dlq` through `plan` + `apply`.

A keyed topic (Avro keys and values from confluent-kafka's AvroSerializer against the
test registry) mixes good records, tombstones and bad records: a bad value next to a
good key, a bad key next to a good value, a record without a key, a tombstone whose key
cannot be decoded, and tombstones next to bad records. A bad record neither inserts,
updates nor deletes anything: the final table state is exact, every bad offset is
skipped or dead-lettered once, and per partition read = written + tombstones + bad.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.deadletter.accounting import RunAccounting
from tableflow_core.readers.duckdb_reader import duckdb_connection
from tests.avro_records import avro_record
from tests.fixtures.apply_env import Env, apply
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.poison import UNKNOWN_SCHEMA_ID
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.integration.test_deadletter_formats import dlq_table_rows, dlq_topic_rows

pytestmark = pytest.mark.slow

KEY_SCHEMA = {"type": "record", "name": "PaymentKey", "fields": [{"name": "id", "type": "long"}]}
VALUE_SCHEMA = avro_record("Payment", id="long", name="string", amount="double")

# (key id or None, value name or None for a tombstone, what is wrong with it)
Record = tuple[int | None, str | None, str]
RECORDS: dict[int, list[Record]] = {
    0: [
        (1, "a", "good"),
        (2, "b", "good"),
        (3, "c", "bad_value"),  # wrong magic byte: key 3 never lands
        (1, None, "good"),  # tombstone next to bad records: deletes key 1
        (4, "d", "bad_key"),  # wrong magic byte in the key: key 4 never lands
        (2, "b2", "good"),  # updates key 2
        (None, "e", "no_key"),
        (2, None, "truncated_key"),  # a tombstone whose key is cut: key 2 is NOT deleted
    ],
    1: [
        (5, "f", "good"),
        (5, None, "good"),  # deletes key 5
        (6, "g", "unknown_id"),  # unknown value schema id: not an update of key 6
        (6, "g2", "good"),
        (7, None, "good"),  # tombstone for a key never seen: deletes nothing
    ],
}
FINAL = {2: ("b2", 2.0), 6: ("g2", 6.0)}
BAD = {(p, o) for p, rs in RECORDS.items() for o, r in enumerate(rs) if r[2] != "good"}
ERROR_CLASSES = {
    "bad_value": ("DecodeError", "magic byte"),
    "unknown_id": ("DecodeError", "unknown schema id"),
    "bad_key": ("KeyDecodeError", "key: "),
    "truncated_key": ("KeyDecodeError", "key: "),
    "no_key": ("KeyDecodeError", "needs a key"),
}


@dataclass(frozen=True)
class Keyed:
    topic: str
    keys: dict[tuple[int, int], bytes | None]
    values: dict[tuple[int, int], bytes | None]


@pytest.fixture(scope="module")
def keyed(kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer) -> Keyed:
    topic = kafka_broker.create_topic(unique_name("upsert_poison"), len(RECORDS))
    client = schema_registry.client()
    key_serializer = AvroSerializer(client, json.dumps(KEY_SCHEMA))
    value_serializer = AvroSerializer(client, json.dumps(VALUE_SCHEMA))
    producer = Producer(kafka_broker.producer_config())
    keys: dict[tuple[int, int], bytes | None] = {}
    values: dict[tuple[int, int], bytes | None] = {}
    for partition, records in RECORDS.items():
        for offset, (key_id, name, kind) in enumerate(records):
            key = None
            if key_id is not None:
                key = key_serializer({"id": key_id}, SerializationContext(topic, MessageField.KEY))
                assert key is not None
            value = None
            if name is not None:
                record = {"id": key_id or 0, "name": name, "amount": float(key_id or 0)}
                value = value_serializer(record, SerializationContext(topic, MessageField.VALUE))
                assert value is not None
            if kind == "bad_value":
                value = b"\x07" + value[1:]  # type: ignore[index]
            elif kind == "unknown_id":
                value = UNKNOWN_SCHEMA_ID + value[5:]  # type: ignore[index]
            elif kind == "bad_key":
                key = b"\x07" + key[1:]  # type: ignore[index]
            elif kind == "truncated_key":
                key = key[:-1]  # type: ignore[index]
            keys[(partition, offset)], values[(partition, offset)] = key, value
            producer.produce(topic, value, key, partition=partition)
    assert producer.flush(10) == 0
    return Keyed(topic, keys, values)


def table_rows(env: Env) -> dict[int, tuple[str, float]]:
    """{id: (name, amount)}, read by pyiceberg and DuckDB (which must agree)."""
    table = env.pyiceberg_table()
    by_pyiceberg = {r["id"]: (r["name"], r["amount"]) for r in table.scan().to_arrow().to_pylist()}
    location = table.metadata_location
    duck = duckdb_connection().sql(f"SELECT id, name, amount FROM iceberg_scan('{location}')")
    rows = duck.fetchall()
    assert len(rows) == len(by_pyiceberg)  # one row per key
    assert {r[0]: (r[1], r[2]) for r in rows} == by_pyiceberg
    return by_pyiceberg


@pytest.mark.parametrize("target", ["skip", "iceberg", "kafka"])
def test_upsert_bad_keys_values_and_tombstones(
    spark: Any, make_env: Any, keyed: Keyed, kafka_broker: KafkaBroker, target: str
) -> None:
    table: dict[str, Any] = {
        "mode": "upsert",
        "key_columns": ["id"],
        "key": {"format": "avro"},
        "metadata_columns": [],
        "on_error": "skip" if target == "skip" else "dlq",
    }
    dlq = ""
    if target == "iceberg":
        dlq = f"{unique_namespace('dlq')}.upsert_bad"
        table["dlq"] = {"type": "iceberg", "table": dlq}
    elif target == "kafka":
        dlq = kafka_broker.create_topic(unique_name("upsert_dlq"), 1)
        table["dlq"] = {"type": "kafka", "topic": dlq}
    env = make_env(keyed.topic, **table)
    result = apply(spark, env)
    assert table_rows(env) == FINAL

    accounting = result.accounting
    assert accounting is not None
    outcome = "skipped" if target == "skip" else "dead_lettered"
    by_partition = {p["partition"]: p for p in accounting["partitions"]}
    for partition, records in RECORDS.items():
        good = [r for r in records if r[2] == "good"]
        bad = len(records) - len(good)
        expected = {
            "read": len(records),
            "written": sum(r[1] is not None for r in good),
            "tombstones": sum(r[1] is None for r in good),
            "filtered": 0,
            "skipped": bad if outcome == "skipped" else 0,
            "dead_lettered": bad if outcome == "dead_lettered" else 0,
        }
        assert {k: by_partition[partition][k] for k in expected} == expected, partition
    snapshot = env.pyiceberg_table().current_snapshot()
    assert snapshot is not None
    stored = RunAccounting.from_snapshot_summary(snapshot.summary.additional_properties, "t")
    assert stored is not None and stored.to_json()["partitions"] == accounting["partitions"]
    assert result.offsets_after == {p: len(rs) for p, rs in RECORDS.items()}
    if target == "skip":
        return

    rows = (
        dlq_table_rows(env, dlq)
        if target == "iceberg"
        else dlq_topic_rows(kafka_broker, dlq, len(BAD))
    )
    where = [(r["source_partition"], r["source_offset"]) for r in rows]
    assert sorted(where) == sorted(BAD)  # each bad offset once
    for row, position in zip(rows, where, strict=True):
        kind = RECORDS[position[0]][position[1]][2]
        error_class, reason = ERROR_CLASSES[kind]
        assert row["stage"] == "decode" and row["source_topic"] == keyed.topic
        assert reason in row["error_message"], (kind, row["error_message"])
        assert row["key"] == keyed.keys[position] and row["value"] == keyed.values[position]
        if target == "iceberg":
            assert row["error_class"] == error_class
