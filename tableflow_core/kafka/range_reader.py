"""Reading one planned offset range inside a Spark task (confluent-kafka assign + seek).

Offsets inside a range can be missing (transaction markers, aborted transactions
under read_committed, compaction), so the loop ends when the consumer's position or
a message's offset reaches the range end, or on a partition EOF at/after the end,
never by counting messages.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection, Iterator, Mapping
from itertools import repeat
from operator import is_
from typing import Any

from tableflow_core.errors import TableflowError
from tableflow_core.kafka.admin import BrokerErrors, brokers_of, consumer_conf
from tableflow_core.kafka.messages import Headers, MessageChunk
from tableflow_core.kafka.offsets import OffsetRange


class KafkaReadError(TableflowError, RuntimeError):
    """A range could not be read completely (broker error or no progress)."""


class _Columns:
    """The chunk being filled."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.timestamps_ms: list[int | None] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[Headers | None] = []

    def chunk(self, topic: str, partition: int) -> MessageChunk:
        n = len(self.offsets)
        return MessageChunk(
            [topic] * n,
            [partition] * n,
            self.offsets,
            self.timestamps_ms,
            self.keys,
            self.values,
            self.headers,
        )


def _take_whole(
    batch: list[Any], topic: str, partition: int, end: int, columns: _Columns
) -> int | None:
    """The common batch, taken a column at a time: every message a record of `topic`
    `partition` before `end`. Returns the offset after its last; None for any other
    batch (an error or end of partition, a message of another range, the range's end
    inside it), which the loop takes message by message."""
    from confluent_kafka import Message

    n = len(batch)
    # The message type's own methods mapped over the batch (0.7x a comprehension's time
    # for `timestamp`, 0.5x for `error`, measured); `is_`: a KafkaError compared to None
    # by == raises.
    if not n or not all(map(is_, map(Message.error, batch), repeat(None))):
        return None
    if [m.partition() for m in batch].count(partition) != n:
        return None
    if [m.topic() for m in batch].count(topic) != n:
        return None
    offsets = [m.offset() for m in batch]
    last = max(offsets)
    if last >= end:
        return None
    columns.offsets.extend(offsets)
    columns.timestamps_ms.extend(
        [timestamp if kind else None for kind, timestamp in map(Message.timestamp, batch)]
    )
    columns.keys.extend([m.key() for m in batch])
    columns.values.extend([m.value() for m in batch])
    columns.headers.extend([m.headers() for m in batch])
    return last + 1


def read_range(
    kafka_conf: Mapping[str, str],
    offset_range: OffsetRange,
    chunk_size: int = 50_000,
    idle_timeout_s: float = 60.0,
) -> Iterator[MessageChunk]:
    """Yield the messages of `offset_range` in chunks of at most `chunk_size` (in offset order)."""
    if offset_range.start >= offset_range.end:
        return
    with RangeReader(kafka_conf, idle_timeout_s) as reader:
        yield from reader.read(offset_range, chunk_size)


METADATA_TIMEOUT_S = 30.0
FETCH_WAIT_MAX_MS = 10


def range_consumer_conf(kafka_conf: Mapping[str, Any], errors: Any) -> dict[str, Any]:
    """A consumer's settings for reading ranges already in the log (`errors`: its error_cb)."""
    overrides: dict[str, Any] = {
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "error_cb": errors,
    }
    if "fetch.wait.max.ms" not in kafka_conf:
        # A planned range is already in the log (it ends at or before the last stable
        # offset), so the broker never needs to wait for data; with the default 500 ms
        # a fetch left outstanding for the range just read held the next range's first
        # fetch for that long (Apache Kafka honours it: 0.5 s per small range, 0.01 s
        # with 10 ms, measured).
        overrides["fetch.wait.max.ms"] = FETCH_WAIT_MAX_MS
    return consumer_conf(kafka_conf, **overrides)


class RangeReader:
    """One consumer reading planned ranges one after the other (assign + seek each).

    A task reading the ranges of many small tables (a shared job) reuses it: a consumer
    costs a client, its threads and a connection, far more than 200 records' read."""

    def __init__(
        self,
        kafka_conf: Mapping[str, str],
        idle_timeout_s: float = 60.0,
        topics: Collection[str] = (),
    ) -> None:
        self._conf = dict(kafka_conf)
        self._brokers = brokers_of(kafka_conf)
        self._idle_timeout_s = idle_timeout_s
        self._errors = BrokerErrors()
        self._many_topics = len(set(topics)) > 1
        self._consumer = self._new_consumer()
        self._read: set[tuple[str, int]] = set()  # partitions this consumer was assigned

    def _new_consumer(self) -> Any:
        from confluent_kafka import Consumer, KafkaException

        consumer = Consumer(range_consumer_conf(self._conf, self._errors))
        if self._many_topics:
            # librdkafka learns the leader of a topic assigned for the first time from a
            # metadata refresh it makes about a second later: a reader moving through
            # many small topics waited ~1 s per topic (0.74 s of a shared job's 1 s per
            # table, measured). One metadata request for every topic up front, instead.
            # If it fails, each read still works (and reports the broker's error).
            with contextlib.suppress(KafkaException):
                consumer.list_topics(timeout=METADATA_TIMEOUT_S)
        return consumer

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._consumer.close()

    def read(self, offset_range: OffsetRange, chunk_size: int = 50_000) -> Iterator[MessageChunk]:
        """The messages of `offset_range` in chunks of at most `chunk_size`, in offset order."""
        from confluent_kafka import KafkaError, TopicPartition

        topic, partition, end = offset_range.topic, offset_range.partition, offset_range.end
        if offset_range.start >= end:
            return
        where = (
            f"topic {topic!r} partition {partition} range [{offset_range.start}, {end}) "
            f"on broker(s) {self._brokers}"
        )
        if (topic, partition) in self._read:
            # A partition read again (two tables of one topic): a new consumer, so that no
            # message the last one fetched ahead for it can be taken for this range's.
            self._consumer.close()
            self._consumer = self._new_consumer()
            self._read.clear()
        self._read.add((topic, partition))
        broker_errors, consumer = self._errors, self._consumer
        broker_errors.last = None
        consumer.assign([TopicPartition(topic, partition, offset_range.start)])
        columns = _Columns()
        last_progress = time.monotonic()
        next_offset = offset_range.start  # the consumer's position is -1001 until a fetch lands
        done = False
        while not done:
            # consume() returns when it has `num_messages` or after `timeout`: asking for
            # no more than the range still holds returns at once on its last messages
            # (asking for 10,000 made every small range wait the full second).
            wanted = max(1, min(chunk_size - len(columns.offsets), 10_000, end - next_offset))
            batch: list[Any] = consumer.consume(num_messages=wanted, timeout=1.0)
            if batch:
                last_progress = time.monotonic()
            taken = _take_whole(batch, topic, partition, end, columns)
            if taken is not None:
                next_offset = taken
                done = next_offset >= end
            # Any other batch, message by message: column appends, no objects.
            offsets, timestamps = columns.offsets, columns.timestamps_ms
            keys, values, headers = columns.keys, columns.values, columns.headers
            for msg in batch if taken is None else ():
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if msg.topic() != topic or msg.partition() != partition:
                            continue  # the end of a range read before this one
                        if msg.offset() >= end:
                            done = True
                            break
                        continue
                    raise KafkaReadError(f"{where}: {error}{broker_errors.suffix()}")
                if msg.topic() != topic or msg.partition() != partition:
                    continue  # fetched for a range read before this one, still queued
                offset = msg.offset()
                if offset >= end:
                    done = True
                    break
                next_offset = offset + 1
                timestamp_type, timestamp = msg.timestamp()
                offsets.append(offset)
                timestamps.append(timestamp if timestamp_type else None)
                keys.append(msg.key())
                values.append(msg.value())
                headers.append(msg.headers())
                if next_offset >= end:
                    done = True
                    break
            if len(offsets) >= chunk_size or (done and offsets):
                yield columns.chunk(topic, partition)
                columns = _Columns()
            if not done and not batch:
                position = consumer.position([TopicPartition(topic, partition)])[0].offset
                if position >= 0:
                    next_offset = max(next_offset, position)
                if position >= end:
                    done = True
                elif time.monotonic() - last_progress > self._idle_timeout_s:
                    raise KafkaReadError(
                        f"{where}: no progress for {self._idle_timeout_s:.0f}s at offset "
                        f"{next_offset}{broker_errors.suffix()}"
                    )
        if columns.offsets:
            yield columns.chunk(topic, partition)
