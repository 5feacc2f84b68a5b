"""Partitions added to a topic, and fetch size limits, on Apache Kafka 4.4.

Proven here (docs/environment.md):
- `AdminClient.create_partitions` adds partitions at once (metadata shows them within
  a second: the controller can answer before the broker's metadata has them); new partitions start at offset 0; fewer partitions is refused
  (INVALID_PARTITIONS). A producer created before the change fails `produce()` to a new
  partition with `_UNKNOWN_PARTITION` until its metadata refreshes
  (`topic.metadata.refresh.interval.ms`, 5 min by default); a new client sees them.
- The broker honours `max.partition.fetch.bytes` and `fetch.max.bytes` (noida-db does
  not): average bytes per Fetch response stay under the limits. librdkafka refuses a
  consumer whose `fetch.max.bytes` is below `message.max.bytes` (1000000 by default).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewPartitions

from tests.fixtures.kafka_server import ApacheKafka, read_partition


def test_partitions_added_start_at_zero_and_stale_producers_do_not_see_them(
    apache_kafka: ApacheKafka,
) -> None:
    topic = apache_kafka.create_topic(f"grow-{uuid.uuid4().hex[:8]}", partitions=1)
    producer = Producer(apache_kafka.client_config(**{"linger.ms": 0}))
    for _ in range(3):
        producer.produce(topic, value=b"old", partition=0)
    producer.flush(10)

    admin = apache_kafka.admin()
    for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
        future.result(timeout=30)
    # The controller's answer can come before the broker's metadata has them (seen in CI:
    # a new producer then failed its records to partitions 1-2 with "Unknown partition").
    deadline = time.monotonic() + 30
    while len(admin.list_topics(topic, timeout=10).topics[topic].partitions) < 3:
        assert time.monotonic() < deadline, f"{topic}: the broker never showed 3 partitions"
        time.sleep(0.1)

    with pytest.raises(KafkaException) as stale:
        producer.produce(topic, value=b"new", partition=2)
    assert stale.value.args[0].code() == KafkaError._UNKNOWN_PARTITION

    fresh = Producer(apache_kafka.client_config(**{"linger.ms": 0}))
    fresh.produce(topic, value=b"new", partition=2)
    fresh.flush(10)
    consumer = Consumer(apache_kafka.consumer_config(f"g-{topic}"))
    try:
        marks = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            for p in range(3)
        ]
    finally:
        consumer.close()
    assert marks == [(0, 3), (0, 0), (0, 1)]
    assert read_partition(apache_kafka.consumer_config(), topic, 2, 0).offsets == [0]

    with pytest.raises(KafkaException) as shrink:
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=30)
    assert shrink.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def _bytes_per_fetch(kafka: ApacheKafka, topic: str, records: int, **limits: Any) -> float:
    """Read both partitions to the end; the average size of a Fetch response."""
    stats: list[dict[str, Any]] = []
    config = kafka.consumer_config(
        f"g-{uuid.uuid4().hex}",
        **{
            "enable.partition.eof": True,
            "statistics.interval.ms": 100,
            "stats_cb": lambda text: stats.append(json.loads(text)),
            # Let the client queue as much as the broker sends: only the fetch limits bound it.
            "queued.max.messages.kbytes": 2_097_151,
            "queued.min.messages": 10_000_000,
            **limits,
        },
    )
    consumer = Consumer(config)
    try:
        consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        received, ends = 0, 0
        for _ in range(10_000):
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error():
                ends += message.error().code() == KafkaError._PARTITION_EOF
                if ends == 2:
                    break
                continue
            received += 1
        stats.clear()
        while not stats:
            consumer.poll(0.1)
    finally:
        consumer.close()
    assert received == records
    brokers = [b for name, b in stats[-1]["brokers"].items() if "bootstrap" not in name]
    fetches = sum(b["req"].get("Fetch", 0) for b in brokers)
    return sum(b["rxbytes"] for b in brokers) / fetches


def test_fetch_limits_are_honoured(apache_kafka: ApacheKafka) -> None:
    topic = apache_kafka.create_topic(f"fetch-{uuid.uuid4().hex[:8]}", partitions=2)
    producer = Producer(
        apache_kafka.client_config(
            **{"linger.ms": 5, "batch.size": 16384, "compression.type": "none"}
        )
    )
    records = 8000
    for index in range(records):
        producer.produce(topic, value=b"x" * 1000, partition=index % 2)
        if index % 2000 == 0:
            producer.poll(0)
    producer.flush(30)  # ~8 MB in batches of <= 16 KB

    default = _bytes_per_fetch(apache_kafka, topic, records)
    per_partition = _bytes_per_fetch(
        apache_kafka,
        topic,
        records,
        **{
            "max.partition.fetch.bytes": 65536,
            "fetch.max.bytes": 262144,
            "message.max.bytes": 65536,
        },
    )
    whole = _bytes_per_fetch(
        apache_kafka,
        topic,
        records,
        **{"fetch.max.bytes": 100_000, "message.max.bytes": 65536},
    )
    assert default > 500_000  # two partitions x max.partition.fetch.bytes (1 MB)
    assert per_partition <= 2 * 65536 + 4096
    assert whole <= 100_000 + 4096

    with pytest.raises(KafkaException) as refused:
        Consumer(apache_kafka.consumer_config("g", **{"fetch.max.bytes": 100_000}))
    assert "message.max.bytes" in str(refused.value)
