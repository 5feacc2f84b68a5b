"""Compaction, retention and deleted records on Apache Kafka 4.4, as a consumer meets them.

Proven here (docs/environment.md; each experiment: docs/history/environment-round-3.md):
- compaction runs within seconds with a small `segment.ms`, `min.cleanable.dirty.ratio`
  and the broker's `log.cleaner.backoff.ms=1000` (the launcher sets it); the active
  segment is never cleaned, so a segment rolls only when a record arrives after
  `segment.ms`. Older offsets of a key disappear; a tombstone survives the first
  cleaning and goes in a later one, `delete.retention.ms` after it. Compaction does not
  move the log start offset: the low watermark stays 0 while offset 0 is gone.
- `AdminClient.delete_records` and `retention.ms` move the log start offset. A consumer
  starting below it is reset by `auto.offset.reset`: `earliest` skips to the log start
  silently, `latest` to the end, `error` delivers `_AUTO_OFFSET_RESET` ("Offset out of
  range") with the offset asked for. Same for a group's committed offset.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from tests.fixtures.kafka_server import ApacheKafka, read_partition

FAST_COMPACTION = {
    "cleanup.policy": "compact",
    "segment.ms": "200",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "2000",
    "file.delete.delay.ms": "100",
}


def _produce(producer: Producer, topic: str, pairs: list[tuple[str | None, str | None]]) -> None:
    for key, value in pairs:
        producer.produce(topic, key=key, value=value)
    producer.flush(10)


def _earliest(kafka: ApacheKafka, tp: TopicPartition) -> int:
    admin = kafka.admin()
    return int(admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(timeout=10).offset)


def test_compaction_removes_old_offsets_then_tombstones(apache_kafka: ApacheKafka) -> None:
    topic = apache_kafka.create_topic(f"compact-{uuid.uuid4().hex[:8]}", config=FAST_COMPACTION)
    producer = Producer(apache_kafka.client_config(**{"linger.ms": 0}))
    _produce(producer, topic, [("a", "a1"), ("b", "b1"), ("c", "c1")])  # 0, 1, 2
    _produce(producer, topic, [("a", "a2"), ("b", "b2"), ("c", None)])  # 3, 4, 5 (tombstone)
    config = apache_kafka.consumer_config(f"g-{topic}", **{"isolation.level": "read_committed"})

    def data_records() -> list[tuple[int, str, str | None]]:
        read = read_partition(config, topic, 0, 0)
        assert read.errors == []
        return [
            (offset, key.decode(), value.decode() if value is not None else None)
            for offset, key, value in read.records
            if key != b"roll"
        ]

    assert data_records() == [
        (0, "a", "a1"), (1, "b", "b1"), (2, "c", "c1"),
        (3, "a", "a2"), (4, "b", "b2"), (5, "c", None),
    ]  # fmt: skip
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(1)
        _produce(producer, topic, [("roll", "r")])  # rolls the active segment
        seen.append(data_records())
        if seen[-1] == [(3, "a", "a2"), (4, "b", "b2")]:
            break
    # First the superseded offsets go (the tombstone stays), then the tombstone.
    assert [(3, "a", "a2"), (4, "b", "b2"), (5, "c", None)] in seen
    assert seen[-1] == [(3, "a", "a2"), (4, "b", "b2")]
    # Compaction leaves the log start offset alone.
    assert _earliest(apache_kafka, TopicPartition(topic, 0)) == 0
    assert read_partition(config, topic, 0, 0).offsets[0] == 3


def test_delete_records_moves_the_log_start_and_auto_offset_reset_decides(
    apache_kafka: ApacheKafka,
) -> None:
    topic = apache_kafka.create_topic(f"deleted-{uuid.uuid4().hex[:8]}")
    tp = TopicPartition(topic, 0)
    producer = Producer(apache_kafka.client_config(**{"linger.ms": 0}))
    _produce(producer, topic, [(str(i), f"v{i}") for i in range(10)])
    admin = apache_kafka.admin()
    deleted = admin.delete_records([TopicPartition(topic, 0, 5)])
    assert next(iter(deleted.values())).result(timeout=10).low_watermark == 5
    assert _earliest(apache_kafka, tp) == 5

    def config(policy: str) -> dict:
        return apache_kafka.consumer_config(
            f"g-{uuid.uuid4().hex}", **{"auto.offset.reset": policy}
        )

    earliest = read_partition(config("earliest"), topic, 0, 2)
    assert earliest.errors == [] and earliest.offsets == [5, 6, 7, 8, 9]  # silently skipped

    latest = read_partition(config("latest"), topic, 0, 2)
    assert latest.offsets == [] and latest.eof_offset == 10

    error = read_partition(config("error"), topic, 0, 2)
    assert error.offsets == []
    assert [e.code() for e in error.errors] == [KafkaError._AUTO_OFFSET_RESET]
    assert "Offset out of range" in error.errors[0].str()

    # A group's committed offset below the log start: the same choice when subscribing.
    group = f"g-{uuid.uuid4().hex}"
    committer = Consumer(apache_kafka.consumer_config(group))
    committer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    committer.close()
    consumer = Consumer(apache_kafka.consumer_config(group, **{"auto.offset.reset": "error"}))
    try:
        consumer.subscribe([topic])
        message = None
        deadline = time.monotonic() + 20
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
        assert message is not None and message.error() is not None
        assert message.error().code() == KafkaError._AUTO_OFFSET_RESET
        assert (message.topic(), message.partition(), message.offset()) == (topic, 0, 2)
    finally:
        consumer.close()


def test_retention_ms_moves_the_log_start_within_seconds(apache_kafka: ApacheKafka) -> None:
    topic = apache_kafka.create_topic(
        f"retention-{uuid.uuid4().hex[:8]}",
        config={"retention.ms": "1000", "segment.ms": "200", "file.delete.delay.ms": "100"},
    )
    tp = TopicPartition(topic, 0)
    producer = Producer(apache_kafka.client_config(**{"linger.ms": 0}))
    _produce(producer, topic, [(None, f"v{i}") for i in range(5)])
    deadline = time.monotonic() + 30
    start = 0
    while time.monotonic() < deadline and start < 5:
        time.sleep(1)
        _produce(producer, topic, [(None, "late")])
        start = _earliest(apache_kafka, tp)
    assert start >= 5  # the first segment (offsets 0-4) was deleted by retention
