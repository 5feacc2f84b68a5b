"""Reading planned offset ranges inside a Spark task or the driver (confluent-kafka
assign + seek): one range, or a table's ranges of distinct partitions in one assignment.

Offsets inside a range can be missing (transaction markers, aborted transactions
under read_committed, compaction), so the loop ends when the consumer's position or
a message's offset reaches the range end, or on a partition EOF at/after the end,
never by counting messages.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
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

    def take_all(self, of: OffsetRange) -> MessageChunk:
        """Every message held, as a chunk of range `of`; none left."""
        n = len(self.offsets)
        chunk = MessageChunk(
            [of.topic] * n,
            [of.partition] * n,
            self.offsets,
            self.timestamps_ms,
            self.keys,
            self.values,
            self.headers,
        )
        self.offsets, self.timestamps_ms, self.keys, self.values, self.headers = [], [], [], [], []
        return chunk

    def take(self, n: int, of: OffsetRange) -> MessageChunk:
        """The first `n` messages held, as a chunk of range `of`; the rest kept."""
        chunk = MessageChunk(
            [of.topic] * n,
            [of.partition] * n,
            self.offsets[:n],
            self.timestamps_ms[:n],
            self.keys[:n],
            self.values[:n],
            self.headers[:n],
        )
        for column in (self.offsets, self.timestamps_ms, self.keys, self.values, self.headers):
            del column[:n]
        return chunk


def _take_whole(batch: list[Any], topic: str, end: int, columns: _Columns) -> int | None:
    """The common run of a batch, taken a column at a time: messages of one partition
    (the caller cut the batch so), each a record of `topic` before `end`. Returns the
    offset after its last; None for any other run (an error or end of partition, a
    message of another topic, the range's end inside it), which is taken message by
    message."""
    n = len(batch)
    # `is not None`: a KafkaError compared to None by == raises.
    if not n or any(m.error() is not None for m in batch):
        return None
    if [m.topic() for m in batch].count(topic) != n:
        return None
    offsets = [m.offset() for m in batch]
    last = max(offsets)
    if last >= end:
        return None
    columns.offsets.extend(offsets)
    columns.timestamps_ms.extend(
        [timestamp if kind else None for kind, timestamp in [m.timestamp() for m in batch]]
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
        for _, chunk in self.read_many([offset_range], chunk_size):
            yield chunk

    def read_many(
        self, ranges: Sequence[OffsetRange], chunk_size: int = 50_000
    ) -> Iterator[tuple[OffsetRange, MessageChunk]]:
        """The messages of every range in `ranges`, as (range, chunk): each range's chunks
        in offset order, at most `chunk_size` messages each, chunks of different ranges
        interleaved. The ranges of distinct partitions are read at once, in one
        assignment: librdkafka fetches them together instead of starting over for each
        (benchmarks/kafka_ranges_read.py, docs/performance.md). At most about
        `chunk_size` messages are held across the ranges: while they hold more, the
        largest partial chunk goes out."""
        for group in _distinct_partitions([r for r in ranges if r.start < r.end]):
            yield from self._read_together(group, chunk_size)

    def _read_together(
        self, ranges: Sequence[OffsetRange], chunk_size: int
    ) -> Iterator[tuple[OffsetRange, MessageChunk]]:
        from confluent_kafka import TopicPartition

        places = {(r.topic, r.partition) for r in ranges}
        if places & self._read:
            # A partition read again (two tables of one topic): a new consumer, so that no
            # message the last one fetched ahead for it can be taken for this range's.
            self._consumer.close()
            self._consumer = self._new_consumer()
            self._read.clear()
        self._read |= places
        self._errors.last = None
        reading = _Reading(ranges, self._consumer, self._errors, self._brokers)
        self._consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges])
        last_progress = time.monotonic()
        while reading.live:
            # consume() returns when it has `num_messages` or after `timeout`: asking for
            # no more than the ranges still hold returns at once on their last messages
            # (asking for 10,000 made every small range wait the full second).
            batch: list[Any] = self._consumer.consume(
                num_messages=reading.wanted(chunk_size), timeout=1.0
            )
            if batch:
                last_progress = time.monotonic()
                reading.take(batch)
            else:
                reading.check_positions()
                if reading.live and time.monotonic() - last_progress > self._idle_timeout_s:
                    raise reading.no_progress(self._idle_timeout_s)
            yield from reading.chunks(chunk_size)


def _distinct_partitions(ranges: Sequence[OffsetRange]) -> Iterator[list[OffsetRange]]:
    """`ranges` in order, cut where a partition comes again (a consumer is assigned a
    partition once)."""
    group: list[OffsetRange] = []
    seen: set[tuple[str, int]] = set()
    for r in ranges:
        if (r.topic, r.partition) in seen:
            yield group
            group, seen = [], set()
        group.append(r)
        seen.add((r.topic, r.partition))
    if group:
        yield group


@dataclass
class _RangeState:
    """One range being read: the offset it is at, the chunk being filled."""

    range: OffsetRange
    next_offset: int
    columns: _Columns = field(default_factory=_Columns)
    done: bool = False


class _Reading:
    """The ranges of one assignment being read (`RangeReader._read_together`)."""

    def __init__(
        self, ranges: Sequence[OffsetRange], consumer: Any, errors: BrokerErrors, brokers: str
    ) -> None:
        self._states = {(r.topic, r.partition): _RangeState(r, r.start) for r in ranges}
        self._consumer = consumer
        self._errors = errors
        self._brokers = brokers
        self.live = len(self._states)

    def wanted(self, chunk_size: int) -> int:
        live = [s for s in self._states.values() if not s.done]
        wanted = min(10_000, sum(s.range.end - s.next_offset for s in live))
        if len(live) == 1:
            wanted = min(wanted, chunk_size - len(live[0].columns.offsets))
        return max(1, wanted)

    def take(self, batch: list[Any]) -> None:
        """The batch's messages into their ranges' chunks: each run of one partition a
        column at a time when it can be (`_take_whole`), else message by message."""
        partitions = [m.partition() for m in batch]
        cuts = [i for i in range(1, len(batch)) if partitions[i] != partitions[i - 1]]
        for start, stop in zip([0, *cuts], [*cuts, len(batch)], strict=True):
            run = batch[start:stop]
            state = self._states.get((run[0].topic(), partitions[start]))
            if state is not None and not state.done:
                r = state.range
                taken = _take_whole(run, r.topic, r.end, state.columns)
                if taken is not None:
                    state.next_offset = taken
                    if taken >= r.end:
                        self._finish(state)
                    continue
            self._take_each(run)

    def _take_each(self, messages: list[Any]) -> None:
        from confluent_kafka import KafkaError

        for msg in messages:
            error = msg.error()
            state = self._states.get((msg.topic(), msg.partition()))
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaReadError(f"{self._where(state)}: {error}{self._errors.suffix()}")
                # An end of partition: of a range read before these (ignored), or at or
                # after this range's end.
                if state is not None and not state.done and msg.offset() >= state.range.end:
                    self._finish(state)
                continue
            if state is None or state.done:
                continue  # fetched for a range read before these, still queued; or past its end
            offset = msg.offset()
            if offset >= state.range.end:
                self._finish(state)
                continue
            state.next_offset = offset + 1
            timestamp_type, timestamp = msg.timestamp()
            columns = state.columns
            columns.offsets.append(offset)
            columns.timestamps_ms.append(timestamp if timestamp_type else None)
            columns.keys.append(msg.key())
            columns.values.append(msg.value())
            columns.headers.append(msg.headers())
            if state.next_offset >= state.range.end:
                self._finish(state)

    def _finish(self, state: _RangeState) -> None:
        from confluent_kafka import TopicPartition

        state.done = True
        self.live -= 1
        if self.live:  # no more fetches for it while the others are read
            self._consumer.pause([TopicPartition(state.range.topic, state.range.partition)])

    def check_positions(self) -> None:
        """After an empty batch: a range whose consumer position reached its end (the
        offsets left are transaction markers or aborted records) is done."""
        from confluent_kafka import TopicPartition

        live = [s for s in self._states.values() if not s.done]
        positions = self._consumer.position(
            [TopicPartition(s.range.topic, s.range.partition) for s in live]
        )
        for state, position in zip(live, positions, strict=True):
            if position.offset >= 0:
                state.next_offset = max(state.next_offset, position.offset)
            if position.offset >= state.range.end:
                self._finish(state)

    def no_progress(self, idle_timeout_s: float) -> KafkaReadError:
        state = next(s for s in self._states.values() if not s.done)
        return KafkaReadError(
            f"{self._where(state)}: no progress for {idle_timeout_s:.0f}s at offset "
            f"{state.next_offset}{self._errors.suffix()}"
        )

    def _where(self, state: _RangeState | None) -> str:
        states = [state] if state is not None else list(self._states.values())
        described = "; ".join(
            f"topic {s.range.topic!r} partition {s.range.partition} range "
            f"[{s.range.start}, {s.range.end})"
            for s in states
        )
        return f"{described} on broker(s) {self._brokers}"

    def chunks(self, chunk_size: int) -> Iterator[tuple[OffsetRange, MessageChunk]]:
        """The chunks ready: each full one, each finished range's last, and while the
        ranges hold `chunk_size` messages together, the largest partial one."""
        for state in self._states.values():
            while len(state.columns.offsets) >= chunk_size:
                yield state.range, state.columns.take(chunk_size, state.range)
            if state.done and state.columns.offsets:
                yield state.range, state.columns.take_all(state.range)
        while sum(len(s.columns.offsets) for s in self._states.values()) >= chunk_size:
            largest = max(self._states.values(), key=lambda s: len(s.columns.offsets))
            yield largest.range, largest.columns.take_all(largest.range)
