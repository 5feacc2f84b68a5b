"""Transactions on Apache Kafka 4.4 (KRaft, transaction.version 2) as librdkafka sees them.

Proven here, what tableflow's reader and planner build on (docs/environment.md):
- every committed or aborted transaction ends with a control record that takes one
  offset; aborted records keep theirs. A read_committed consumer gets neither: gaps.
- with a transaction open, the last stable offset (LSO) is the open transaction's first
  offset; `AdminClient.list_offsets(latest, isolation_level=READ_COMMITTED)` and a
  read_committed consumer's `get_watermark_offsets(cached=False)` return it, while the
  *cached* watermarks (after a fetch) give the high watermark.
- a read_committed consumer stops at the LSO: its end-of-partition event and its
  position are the LSO, beyond its last record and the control records before it.
"""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from tests.fixtures.kafka_server import ApacheKafka, read_partition


def _latest(kafka: ApacheKafka, tp: TopicPartition, level: IsolationLevel) -> int:
    admin = kafka.admin()  # keep the client alive until the future resolves
    result = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)
    return int(result[tp].result(timeout=10).offset)


def _transaction(
    producer: Producer, topic: str, label: str, count: int, end: str, offsets: dict[str, int]
) -> None:
    def delivered(error, message):  # type: ignore[no-untyped-def]
        assert error is None, error
        offsets[message.value().decode()] = message.offset()

    producer.begin_transaction()
    for index in range(count):
        producer.produce(topic, key=f"k{index}", value=f"{label}{index}", on_delivery=delivered)
    producer.flush(10)
    if end == "commit":
        producer.commit_transaction(30)
    elif end == "abort":
        producer.abort_transaction(30)


def test_control_records_aborted_records_and_the_last_stable_offset(
    apache_kafka: ApacheKafka,
) -> None:
    topic = apache_kafka.create_topic(f"txn-{uuid.uuid4().hex[:8]}")
    tp = TopicPartition(topic, 0)
    producer = Producer(
        apache_kafka.client_config(**{"transactional.id": f"tx-{topic}", "linger.ms": 0})
    )
    producer.init_transactions(30)
    offsets: dict[str, int] = {}
    _transaction(producer, topic, "c1-", 3, "commit", offsets)
    _transaction(producer, topic, "a1-", 2, "abort", offsets)
    _transaction(producer, topic, "c2-", 3, "commit", offsets)
    _transaction(producer, topic, "a2-", 1, "abort", offsets)
    _transaction(producer, topic, "open-", 2, "open", offsets)

    # One control record after each finished transaction: 3, 6, 10, 12.
    assert offsets == {
        "c1-0": 0, "c1-1": 1, "c1-2": 2,
        "a1-0": 4, "a1-1": 5,
        "c2-0": 7, "c2-1": 8, "c2-2": 9,
        "a2-0": 11,
        "open-0": 13, "open-1": 14,
    }  # fmt: skip
    assert _latest(apache_kafka, tp, IsolationLevel.READ_COMMITTED) == 13  # the LSO
    assert _latest(apache_kafka, tp, IsolationLevel.READ_UNCOMMITTED) == 15  # high watermark

    committed_config = apache_kafka.consumer_config(
        f"g-{topic}", **{"isolation.level": "read_committed"}
    )
    uncommitted_config = apache_kafka.consumer_config(
        f"g-{topic}", **{"isolation.level": "read_uncommitted"}
    )
    committed = read_partition(committed_config, topic, 0, 0)
    assert committed.errors == []
    assert committed.offsets == [0, 1, 2, 7, 8, 9]
    # It stops at the LSO: the end event and the position are 13, not 10.
    assert committed.eof_offset == 13
    assert committed.position == 13

    uncommitted = read_partition(uncommitted_config, topic, 0, 0)
    assert uncommitted.offsets == [0, 1, 2, 4, 5, 7, 8, 9, 11, 13, 14]
    assert uncommitted.eof_offset == 15

    # Watermarks: a query follows the consumer's isolation level; the cache holds the
    # high watermark of the last fetch response, whatever the level.
    consumer = Consumer(committed_config)
    try:
        assert consumer.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 13)
        consumer.assign([TopicPartition(topic, 0, 0)])
        while consumer.poll(0.5) is not None:
            pass
        assert consumer.get_watermark_offsets(tp, cached=True) == (0, 15)
        assert consumer.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 13)
    finally:
        consumer.close()

    producer.commit_transaction(30)
    # The marker is written after commit_transaction returns: the LSO reaches it soon after.
    assert apache_kafka.stable_offsets(topic) == {0: 16}
    rest = read_partition(committed_config, topic, 0, committed.position)
    assert rest.offsets == [13, 14]
    assert rest.eof_offset == 16 and rest.position == 16


def test_seeking_into_a_gap_and_committing_a_control_offset(apache_kafka: ApacheKafka) -> None:
    topic = apache_kafka.create_topic(f"txn-gap-{uuid.uuid4().hex[:8]}")
    producer = Producer(
        apache_kafka.client_config(**{"transactional.id": f"tx-{topic}", "linger.ms": 0})
    )
    producer.init_transactions(30)
    offsets: dict[str, int] = {}
    _transaction(producer, topic, "c1-", 2, "commit", offsets)  # 0, 1, marker 2
    _transaction(producer, topic, "a1-", 2, "abort", offsets)  # 3, 4, marker 5
    _transaction(producer, topic, "c2-", 1, "commit", offsets)  # 6, marker 7
    apache_kafka.stable_offsets(topic)  # marker 7 written
    config = apache_kafka.consumer_config(f"g-{topic}", **{"isolation.level": "read_committed"})

    # Starting on an aborted record or a control record delivers the next committed one.
    assert read_partition(config, topic, 0, 3).offsets == [6]
    assert read_partition(config, topic, 0, 2).offsets == [6]
    # A control record's offset is a valid offset to commit (it is where a reader resumes).
    consumer = Consumer(config)
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        assert consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 2
    finally:
        consumer.close()
