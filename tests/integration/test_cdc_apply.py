"""Debezium change streams through `tableflow apply` (docs/cdc.md): real broker, dev
registry, catalog server and Spark; events serialized by confluent-kafka's AvroSerializer
as Debezium 3.x writes PostgreSQL changes (tests/cdc_events.py), read back by pyiceberg
and Spark and compared with the source table the workload ends on.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.cdc_events import (
    KEY_SCHEMA,
    Change,
    avro_envelope_schema,
    envelope,
    row,
    to_partitions,
    workload,
)
from tests.fixtures.apply_env import apply, run_cli_apply
from tests.fixtures.stack import KafkaBroker, unique_name
from tests.integration.test_upsert import use_writer

pytestmark = pytest.mark.slow

PARTITIONS = 3
TIER = {"name": "tier", "type": ["null", "string"], "default": None}  # ALTER TABLE ADD COLUMN


class ChangeTopic:
    """A Debezium topic of `pg.public.customers`: Avro keys {id}, Avro envelopes."""

    def __init__(self, broker: KafkaBroker, registry_url: str) -> None:
        self.name = broker.create_topic(unique_name("pg-public-customers"), PARTITIONS)
        self.bootstrap = broker.bootstrap
        self.client = SchemaRegistryClient({"url": registry_url})

    def encode(
        self, changes: list[Change], schema: dict[str, Any]
    ) -> list[tuple[bytes, bytes | None]]:
        keys = AvroSerializer(self.client, json.dumps(KEY_SCHEMA))
        values = AvroSerializer(self.client, json.dumps(schema))
        key_ctx = SerializationContext(self.name, MessageField.KEY)
        value_ctx = SerializationContext(self.name, MessageField.VALUE)
        out = []
        for c in changes:
            key = keys({"id": c.key}, key_ctx)
            value = None if c.op == "tombstone" else values(envelope(c), value_ctx)
            assert key is not None
            out.append((key, value))
        return out

    def produce(
        self, changes: list[Change], schema: dict[str, Any] | None = None, replay: bool = True
    ) -> None:
        encoded = self.encode(changes, schema or avro_envelope_schema())
        producer = Producer({"bootstrap.servers": self.bootstrap})
        for m in to_partitions(encoded, changes, PARTITIONS, replay):
            producer.produce(
                self.name, m.value, key=m.key, partition=m.partition, timestamp=m.timestamp_ms
            )
        producer.flush(30)


def mirror_config(**extra: Any) -> dict[str, Any]:
    return {
        "mode": "upsert",
        "key_columns": ["id"],
        "key": {"format": "avro"},
        "value": {"format": "avro", "envelope": "debezium"},
        "metadata_columns": ["cdc_op", "cdc_source_ts", "cdc_tx_id"],
        **extra,
    }


def mirror_rows(
    env: Any, spark: Any, columns: tuple[str, ...] = ("name",)
) -> dict[int, tuple[Any, ...]]:
    """{id: (name, _cdc_lsn)} by pyiceberg; Spark must agree."""
    read = env.pyiceberg_table().scan().to_arrow()
    found = {r["id"]: (*(r[c] for c in columns), r["_cdc_lsn"]) for r in read.to_pylist()}
    assert len(found) == read.num_rows, "one row per key"
    by_spark = {
        r["id"]: (*(r[c] for c in columns), r["_cdc_lsn"])
        for r in spark.table(env.spec().identifier).collect()
    }
    assert by_spark == found
    return found


def apply_until_done(spark: Any, env: Any) -> int:
    runs = 0
    while apply(spark, env).status != "no_changes":
        runs += 1
        assert runs < 50
    return runs


@pytest.mark.parametrize("writer", ["driver", "spark"])
def test_the_mirror_follows_the_source_across_runs_and_a_schema_change(
    spark: Any,
    make_env: Any,
    kafka_broker: KafkaBroker,
    schema_registry: Any,
    monkeypatch: pytest.MonkeyPatch,
    writer: str,
) -> None:
    use_writer(monkeypatch, writer)
    topic = ChangeTopic(kafka_broker, schema_registry.url)
    changes, expected = workload(random.Random(7), keys=40, transactions=80)
    topic.produce(changes)
    env = make_env(topic.name, **mirror_config(max_records_per_run=60))
    runs = apply_until_done(spark, env)
    assert runs >= 4
    assert mirror_rows(env, spark) == expected
    meta = env.pyiceberg_table().scan().to_arrow().to_pylist()
    assert {r["_cdc_op"] for r in meta} <= {"r", "c", "u"}
    assert all(r["_cdc_source_ts"] is not None and r["_cdc_tx_id"] is not None for r in meta)

    # ALTER TABLE customers ADD COLUMN tier: Debezium registers a new envelope version.
    live = sorted(expected)
    lsn, commit = 20_000, 19_000
    later = [
        Change("u", live[0], None, {**row(live[0], "t0"), "tier": "gold"}, lsn, commit, 900),
        Change("c", 5_000, None, {**row(5_000, "new"), "tier": "silver"}, lsn + 1, commit, 900),
        Change("d", live[1], None, None, lsn + 2, commit, 900),
        Change("tombstone", live[1], None, None, 0, None, 0),
    ]
    topic.produce(later, avro_envelope_schema([TIER]))
    env.configure(**mirror_config())
    evolved = apply(spark, env)
    assert any(d.startswith("evolve_schema") for d in evolved.ddl), evolved.ddl
    expected_tiers = {k: (name, None, at) for k, (name, at) in expected.items()}
    expected_tiers[live[0]] = ("t0", "gold", lsn)
    expected_tiers[5_000] = ("new", "silver", lsn + 1)
    del expected_tiers[live[1]]
    assert mirror_rows(env, spark, ("name", "tier")) == expected_tiers
    assert apply(spark, env).status == "no_changes"


def test_a_killed_apply_rerun_gives_the_same_mirror(
    spark: Any, make_env: Any, kafka_broker: KafkaBroker, schema_registry: Any
) -> None:
    topic = ChangeTopic(kafka_broker, schema_registry.url)
    changes, expected = workload(random.Random(11), keys=20, transactions=30)
    half = len(changes) // 2
    topic.produce(changes[:half])
    env = make_env(topic.name, **mirror_config())
    apply(spark, env)
    before = mirror_rows(env, spark)
    topic.produce(changes[half:])
    for point in ("shared_mid_write", "after_merge", "before_commit"):
        run_cli_apply(env, crash_at=point)
        assert mirror_rows(env, spark) == before
    apply(spark, env)
    assert mirror_rows(env, spark) == expected


def test_the_changelog_keeps_every_change_and_truncates_are_routed(
    spark: Any, make_env: Any, kafka_broker: KafkaBroker, schema_registry: Any
) -> None:
    topic = ChangeTopic(kafka_broker, schema_registry.url)
    changes = [
        Change("r", 1, None, row(1, "a", "1.25"), 100, None, 5, snapshot="last"),
        Change("c", 2, None, row(2, "b"), 210, 150, 6),
        Change("u", 1, None, row(1, "a2", "2.50"), 220, 150, 6),
        Change("d", 2, row(2, None), None, 230, 215, 7),
        Change("tombstone", 2, None, None, 0, None, 0),
        Change("t", 0, None, None, 240, 235, 8),
    ]
    topic.produce(changes, replay=False)
    env = make_env(
        topic.name,
        value={"format": "avro", "envelope": "debezium"},
        metadata_columns=["cdc_op", "cdc_lsn", "cdc_tx_id", "partition", "offset"],
        on_error="skip",
    )
    result = apply(spark, env)
    assert result.records_read == 6
    assert result.records_skipped == 1  # the truncate: counted, not applied
    rows = sorted(
        (
            r["_cdc_lsn"],
            r["id"],
            r["name"],
            r["_cdc_op"],
            None if r["balance"] is None else str(r["balance"]),
        )
        for r in env.pyiceberg_table().scan().to_arrow().to_pylist()
    )
    assert rows == [
        (100, 1, "a", "r", "1.25"),
        (210, 2, "b", "c", None),
        (220, 1, "a2", "u", "2.50"),
        (230, 2, None, "d", None),
    ]
