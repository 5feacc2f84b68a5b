"""The sample producer against the real broker and registry: records land, keyed, with known sums."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.dev.producer import produce_sample
from tableflow_core.dev.sample_data import generate_customers, generate_orders
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name


def _consume_all(
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistryServer,
    topic: str,
    partitions: int,
    expected: int,
) -> list[tuple[int, str, Any]]:
    """(partition, key, decoded value or None) for every message of `topic`."""
    consumer = Consumer(kafka_broker.consumer_config(group_id=unique_name("g")))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    deserialize = AvroDeserializer(schema_registry.client())
    ctx = SerializationContext(topic, MessageField.VALUE)
    out: list[tuple[int, str, Any]] = []
    try:
        while len(out) < expected:
            batch = consumer.consume(min(10_000, expected - len(out)), timeout=10)
            assert batch, f"only {len(out)} of {expected} messages arrived on {topic}"
            for message in batch:
                assert message.error() is None, message.error()
                value = message.value()
                out.append(
                    (
                        message.partition(),
                        message.key().decode(),
                        None if value is None else deserialize(value, ctx),
                    )
                )
    finally:
        consumer.close()
    return out


def test_orders_land_keyed_with_deterministic_sums(
    kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer
) -> None:
    topic = unique_name("orders")
    result = produce_sample(
        "orders", kafka_broker.bootstrap, schema_registry.url, topic, 3000, partitions=4, seed=7
    )
    expected = list(generate_orders(3000, seed=7))
    assert result.records == 3000 and result.distinct_keys == 3000 and result.tombstones == 0
    assert (
        sorted(result.per_partition) == [0, 1, 2, 3] and sum(result.per_partition.values()) == 3000
    )
    assert result.total_amount == sum((r.value["amount"] for r in expected if r.value), Decimal(0))
    assert result.subject == f"{topic}-value" and result.schema_version == 1

    consumed = _consume_all(kafka_broker, schema_registry, topic, 4, 3000)
    assert len(consumed) == 3000
    assert {key for _, key, _ in consumed} == {r.key for r in expected}
    assert all(value["order_id"] == key for _, key, value in consumed)
    assert sum((value["amount"] for _, _, value in consumed), Decimal(0)) == result.total_amount
    assert sum(value["quantity"] for _, _, value in consumed) == result.total_quantity
    by_key = {key: value for _, key, value in consumed}
    sample = expected[123].value
    assert sample is not None
    got = by_key[expected[123].key]
    assert (
        got["shipping_address"] == sample["shipping_address"]
        and got["created_at"] == sample["created_at"]
    )
    # Same key -> same partition (the producer's default partitioner hashes the key).
    partitions_of = {}
    for partition, key, _ in consumed:
        partitions_of.setdefault(key, set()).add(partition)
    assert all(len(p) == 1 for p in partitions_of.values())


def test_schema_v2_adds_optional_field(
    kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer
) -> None:
    topic = unique_name("orders-evolve")
    v1 = produce_sample(
        "orders", kafka_broker.bootstrap, schema_registry.url, topic, 100, partitions=1
    )
    v2 = produce_sample(
        "orders",
        kafka_broker.bootstrap,
        schema_registry.url,
        topic,
        100,
        partitions=1,
        seed=1,
        schema_version=2,
    )
    assert (v1.schema_version, v2.schema_version) == (1, 2) and v1.schema_id != v2.schema_id
    assert schema_registry.client().get_versions(f"{topic}-value") == [1, 2]
    consumed = _consume_all(kafka_broker, schema_registry, topic, 1, 200)
    assert [("channel" in value) for _, _, value in consumed] == [False] * 100 + [True] * 100


def test_customers_with_tombstones(
    kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer
) -> None:
    topic = unique_name("customers")
    result = produce_sample(
        "customers",
        kafka_broker.bootstrap,
        schema_registry.url,
        topic,
        1000,
        partitions=2,
        distinct_customers=100,
        tombstone_every=10,
    )
    assert result.records == 1000 and result.tombstones == 100 and result.distinct_keys <= 100
    consumed = _consume_all(kafka_broker, schema_registry, topic, 2, 1000)
    assert sum(value is None for _, _, value in consumed) == 100
    assert all(value["customer_id"] == int(key) for _, key, value in consumed if value is not None)
    # Latest state per key (what an upsert table holds) matches the generator's: within a
    # partition messages keep produce order, and a key never changes partition.
    expected_latest = {
        r.key: r.value for r in generate_customers(1000, distinct_customers=100, tombstone_every=10)
    }
    latest = {key: value for _, key, value in consumed}
    assert latest == expected_latest
    assert any(value is None for value in latest.values())
