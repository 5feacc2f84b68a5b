"""Reading one planned offset range inside a Spark task (confluent-kafka assign + seek).

Offsets inside a range can be missing (transaction markers, aborted transactions
under read_committed, compaction), so the loop ends when the consumer's position or
a message's offset reaches the range end, or on a partition EOF at/after the end,
never by counting messages.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from tableflow_core.kafka.admin import brokers_of, consumer_conf
from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.kafka.offsets import OffsetRange


class KafkaReadError(RuntimeError):
    """A range could not be read completely (broker error or no progress)."""


class BrokerErrors:
    """Client-level errors librdkafka reports through `error_cb` (not as messages).

    A broker that goes away mid-read never shows up in `consume()`: librdkafka retries
    and reports "Connection refused" / "all brokers down" only to this callback, so the
    reader keeps the last one to name in its error.
    """

    def __init__(self) -> None:
        self.last: str | None = None

    def __call__(self, error: Any) -> None:
        self.last = str(error)

    def suffix(self) -> str:
        return f"; last broker error: {self.last}" if self.last else ""


def _headers(raw: list[tuple[str, bytes | None]] | None) -> tuple[tuple[str, bytes | None], ...]:
    return tuple(raw) if raw else ()


def read_range(
    kafka_conf: Mapping[str, str],
    offset_range: OffsetRange,
    chunk_size: int = 50_000,
    idle_timeout_s: float = 60.0,
) -> Iterator[list[KafkaMessage]]:
    """Yield the messages of `offset_range` in chunks of at most `chunk_size`."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    topic, partition, end = offset_range.topic, offset_range.partition, offset_range.end
    if offset_range.start >= end:
        return
    brokers = brokers_of(kafka_conf)
    where = (
        f"topic {topic!r} partition {partition} range [{offset_range.start}, {end}) "
        f"on broker(s) {brokers}"
    )
    broker_errors = BrokerErrors()
    consumer = Consumer(
        consumer_conf(
            kafka_conf,
            **{
                "enable.partition.eof": True,
                "auto.offset.reset": "error",
                "error_cb": broker_errors,
            },
        )
    )
    try:
        consumer.assign([TopicPartition(topic, partition, offset_range.start)])
        chunk: list[KafkaMessage] = []
        last_progress = time.monotonic()
        next_offset = offset_range.start  # the consumer's position is -1001 until a fetch lands
        done = False
        while not done:
            batch: list[Any] = consumer.consume(num_messages=min(chunk_size, 10_000), timeout=1.0)
            if batch:
                last_progress = time.monotonic()
            for msg in batch:
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= end:
                            done = True
                            break
                        continue
                    raise KafkaReadError(f"{where}: {error}{broker_errors.suffix()}")
                offset = msg.offset()
                next_offset = offset + 1
                if offset >= end:
                    done = True
                    break
                timestamp_type, timestamp = msg.timestamp()
                chunk.append(
                    KafkaMessage(
                        topic,
                        partition,
                        offset,
                        timestamp if timestamp_type != 0 else None,
                        msg.key(),
                        msg.value(),
                        _headers(msg.headers()),
                    )
                )
                if offset + 1 >= end:
                    done = True
                    break
            if len(chunk) >= chunk_size or (done and chunk):
                yield chunk
                chunk = []
            if not done and not batch:
                position = consumer.position([TopicPartition(topic, partition)])[0].offset
                if position >= 0:
                    next_offset = max(next_offset, position)
                if position >= end:
                    done = True
                elif time.monotonic() - last_progress > idle_timeout_s:
                    raise KafkaReadError(
                        f"{where}: no progress for {idle_timeout_s:.0f}s at offset {next_offset}"
                        f"{broker_errors.suffix()}"
                    )
        if chunk:
            yield chunk
    finally:
        consumer.close()
