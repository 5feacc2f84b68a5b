"""The latest record of a topic that has a value: where `plan` reads a schema that travels
inside the records (`format: connect_json`, schemas/connect_json.py), with no registry.

Each partition's last `LOOK_BACK` records are read (a delete's tombstone, a null value,
often ends a partition); of each partition's last record with a value, the one with the
greatest Kafka timestamp (then partition) is the topic's latest: its schema is the one
the connector writes now. Nothing is committed; a `read_committed` consumer skips what
an open or aborted transaction holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tableflow_core.kafka.admin import BrokerErrors, _partitions, brokers_of, consumer_conf

# Records read back from each partition's end.
LOOK_BACK = 64


@dataclass(frozen=True)
class LatestRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes

    def describe(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


def latest_record(
    consumer_config: Mapping[str, str], topic: str, timeout: float = 10.0
) -> LatestRecord | None:
    """The topic's latest record with a value (above), None when no partition has one in
    its last LOOK_BACK records (an empty topic)."""
    from confluent_kafka import Consumer, TopicPartition

    errors = BrokerErrors()
    consumer = Consumer(
        consumer_conf(consumer_config, error_cb=errors, **{"enable.partition.eof": True})
    )
    try:
        brokers = brokers_of(consumer_config)
        ranges: dict[int, tuple[int, int]] = {}
        for number in _partitions(consumer, topic, timeout, brokers, errors):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, number), timeout=timeout
            )
            if high > low:
                ranges[number] = (max(low, high - LOOK_BACK), high)
        if not ranges:
            return None
        consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in ranges.items()])
        found: dict[int, LatestRecord] = {}
        pending = set(ranges)
        while pending:
            message = consumer.poll(timeout)
            if message is None:
                break  # the broker stopped answering: what was read is what is known
            partition = message.partition()
            offset = message.offset()
            if message.error() is not None or partition is None or offset is None:
                pending.discard(partition)  # the partition's end (or an error)
                continue
            if offset >= ranges[partition][1] - 1:
                pending.discard(partition)
            value = message.value()
            if value is not None:
                _, stamp = message.timestamp()
                found[partition] = LatestRecord(
                    topic, partition, offset, stamp, message.key(), value
                )
        if not found:
            return None
        return max(found.values(), key=lambda r: (r.timestamp_ms, r.partition))
    finally:
        consumer.close()
