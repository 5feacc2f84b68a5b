"""What the metrics read after a cycle: each table's lag (the code of `tableflow
status`) and the newest Kafka timestamp a commit took in (its freshness).

A table the cycle ran to its end told its committed offsets and its commit's time in its
result (`CycleFacts`): its reading needs the topic's watermarks (and, for a commit, the
tail of what it took in), not the table. A table the cycle did not tell (it failed, or
was not run), and every table once, is loaded from the catalog as `status` loads it: with
a refresh of one second, loading each table again would double the catalog's loads and
parse every metadata.json twice a cycle.

They run in the observer's own thread (`observer.py`), never in the scheduler's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tableflow_core.config.project import Project, Table
from tableflow_core.kafka.admin import (
    BrokerErrors,
    admin_conf,
    admin_watermarks,
    brokers_of,
)
from tableflow_core.kafka.range_reader import KafkaReadError, range_consumer_conf
from tableflow_core.observability.metrics import TableCommit
from tableflow_core.plan.world import KAFKA_TIMEOUT_S, Readers, default_readers
from tableflow_core.state.offsets import read_committed_offsets
from tableflow_core.targets.kafka import kafka_consumer_config
from tableflow_core.tasks.status import committed_offsets, table_lag

# The last records of each partition a commit advanced, read for their timestamps (a
# transactional topic ends with a control record, which has none to give).
TAIL_RECORDS = 16


@dataclass(frozen=True)
class CycleFacts:
    """What a cycle's result told of a table: its commit (None: none) and the offsets it
    has committed, as the cycle left them (None: not known, the table is loaded)."""

    commit: TableCommit | None = None
    offsets: Mapping[int, int] | None = None

    def newer(self, other: CycleFacts | None) -> CycleFacts:
        """These facts, keeping `other`'s commit (an older one not yet read) if these
        have none."""
        if self.commit is not None or other is None:
            return self
        return CycleFacts(other.commit, self.offsets)


@dataclass(frozen=True)
class TableReading:
    table: str
    lag: int | None = None  # None: Kafka or the table could not be read
    last_commit_s: float | None = None  # Unix seconds of the table's last data commit
    freshness_s: float | None = None  # of the commit read, when there was one


@dataclass
class TableReader:
    project: Project
    readers: Readers | None = None
    # Newest Kafka timestamp (ms) in [start, end) per partition; default reads the topic.
    newest_timestamp_ms: Callable[[str, Mapping[int, tuple[int, int]]], int | None] | None = None

    def __post_init__(self) -> None:
        self._io = self.readers or default_readers()
        self._kafka_conf = kafka_consumer_config(self.project.target.kafka)
        # Kept across cycles: a client per table per cycle cost more CPU than its reads.
        self._watermarks = KeptWatermarks(self._kafka_conf)
        self._tails = TailTimestamps(self._kafka_conf)
        self._loaded: set[str] = set()  # tables read from the catalog once

    def close(self) -> None:
        """Close the kept Kafka clients (from the thread that reads)."""
        self._watermarks.close()
        self._tails.close()

    def _topic_watermarks(self, topic: str) -> dict[int, tuple[int, int]]:
        if self.readers is not None:  # the caller's I/O (tests)
            return dict(self._io.get_watermarks(self._kafka_conf, topic, KAFKA_TIMEOUT_S))
        return self._watermarks.of(topic)

    def read(
        self, catalog: Any, tables: Iterable[Table], facts: Mapping[str, CycleFacts]
    ) -> list[TableReading]:
        """A reading per table (a table that cannot be read gives what could be)."""
        watermarks: dict[str, Any] = {}
        readings = []
        for table in tables:
            told = facts.get(table.name, CycleFacts())
            if self._told_enough(table, told):
                readings.append(self._from_cycle(table, told, watermarks))
            else:
                readings.append(self._loaded_table(catalog, table, told.commit, watermarks))
        return readings

    def _told_enough(self, table: Table, told: CycleFacts) -> bool:
        commit = told.commit
        return (
            table.name in self._loaded
            and told.offsets is not None
            and (commit is None or commit.committed_at_ms is not None)
        )

    def _from_cycle(
        self, table: Table, told: CycleFacts, watermarks: dict[str, Any]
    ) -> TableReading:
        lag = self._lag(table, told.offsets, watermarks)
        commit = told.commit
        if commit is None or commit.committed_at_ms is None:
            return TableReading(table.name, lag)  # the last commit's time is unchanged
        freshness = self._freshness(table, commit, commit.committed_at_ms)
        return TableReading(table.name, lag, commit.committed_at_ms / 1000, freshness)

    def _loaded_table(
        self,
        catalog: Any,
        table: Table,
        commit: TableCommit | None,
        watermarks: dict[str, Any],
    ) -> TableReading:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            iceberg = catalog.load_table((*table.namespace, table.table))
        except (NoSuchTableError, NoSuchNamespaceError):
            iceberg = None
        except Exception:
            return TableReading(table.name)
        committed = committed_offsets(iceberg, table) if iceberg is not None else None
        lag = self._lag(table, committed, watermarks)
        last_commit_s = None
        found = read_committed_offsets(iceberg) if iceberg is not None else None
        if found is not None and found.snapshot_id is not None:  # the last data commit's
            snapshot = iceberg.snapshot_by_id(found.snapshot_id)
            last_commit_s = snapshot.timestamp_ms / 1000 if snapshot is not None else None
        if iceberg is not None:
            self._loaded.add(table.name)
        freshness = None
        if commit is not None and iceberg is not None:
            snapshot = iceberg.snapshot_by_id(commit.snapshot_id)
            if snapshot is not None:
                freshness = self._freshness(table, commit, snapshot.timestamp_ms)
        return TableReading(table.name, lag, last_commit_s, freshness)

    def _lag(
        self, table: Table, committed: Mapping[int, int] | None, watermarks: dict[str, Any]
    ) -> int | None:
        try:
            if table.topic not in watermarks:
                watermarks[table.topic] = self._topic_watermarks(table.topic)
            partitions = table_lag(
                table, committed, watermarks[table.topic], self._io, self._kafka_conf
            )
        except Exception:
            watermarks.pop(table.topic, None)
            return None
        return sum(p.lag for p in partitions)

    def _freshness(self, table: Table, commit: TableCommit, committed_ms: int) -> float | None:
        """Seconds from the newest Kafka timestamp the commit took in to its commit."""
        ranges = {
            partition: (max(commit.offsets_before.get(partition, 0), end - TAIL_RECORDS), end)
            for partition, end in commit.offsets_after.items()
            if end > commit.offsets_before.get(partition, 0)
        }
        if not ranges:
            return None
        read = self.newest_timestamp_ms or self._tails.newest_ms
        try:
            newest = read(table.topic, ranges)
        except Exception:
            return None
        if newest is None:
            return None
        return max(0.0, (committed_ms - newest) / 1000)


class KeptWatermarks:
    """`get_watermarks` (the same requests, so `status` and the metrics count lag from
    the same offsets) through one AdminClient kept until `close()`."""

    def __init__(self, kafka_conf: Mapping[str, Any]) -> None:
        self._conf = kafka_conf
        self._brokers = brokers_of(kafka_conf)
        self._errors = BrokerErrors()
        self._admin: Any = None

    def of(self, topic: str) -> dict[int, tuple[int, int]]:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(admin_conf(self._conf, error_cb=self._errors))
        return admin_watermarks(self._admin, topic, KAFKA_TIMEOUT_S, self._brokers, self._errors)

    def close(self) -> None:
        self._admin = None  # an AdminClient has no close(); dropping it ends its threads


class TailTimestamps:
    """The newest Kafka timestamp among offset ranges of a topic, read by one consumer
    kept across calls (assigned anew each call; a message outside a range, fetched ahead
    for an earlier one, is left out: an offset's record is the same whoever fetched it)."""

    def __init__(self, kafka_conf: Mapping[str, Any], idle_timeout_s: float = 10.0) -> None:
        self._conf = dict(kafka_conf)
        self._idle_timeout_s = idle_timeout_s
        self._errors = BrokerErrors()
        self._consumer: Any = None

    def newest_ms(self, topic: str, ranges: Mapping[int, tuple[int, int]]) -> int | None:
        from confluent_kafka import TopicPartition

        consumer = self._consumer or self._new_consumer()
        left = {p: r for p, r in ranges.items() if r[0] < r[1]}
        consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in left.items()])
        try:
            return self._newest_in(consumer, topic, left)
        finally:
            # Left assigned at the end of the log, the consumer would fetch every
            # `fetch.wait.max.ms` (10 ms) until the next cycle, and take in every new
            # record of the topic: the kept consumer's whole cost between reads.
            consumer.unassign()

    def _newest_in(self, consumer: Any, topic: str, left: dict[int, tuple[int, int]]) -> int | None:
        from confluent_kafka import KafkaError, TopicPartition

        newest: int | None = None
        last_progress = time.monotonic()
        while left:
            # consume() waits `timeout` unless it gets `num_messages`: ask for no more
            # than the ranges still hold (each a 16-record tail), as RangeReader does.
            wanted = max(1, min(1000, sum(end - start for start, end in left.values())))
            batch: list[Any] = consumer.consume(num_messages=wanted, timeout=1.0)
            for msg in batch:
                partition = msg.partition()
                if msg.topic() != topic or partition not in left:
                    continue
                start, end = left[partition]
                error = msg.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaReadError(f"topic {topic!r} partition {partition}: {error}")
                offset = msg.offset()
                if error is None and start <= offset < end:
                    last_progress = time.monotonic()
                    kind, stamp = msg.timestamp()
                    if kind and stamp >= 0:
                        newest = stamp if newest is None else max(newest, stamp)
                if offset + (error is None) >= end:
                    del left[partition]
            if left and not batch:
                # A transactional range ends with a control record no message shows.
                positions = consumer.position([TopicPartition(topic, p) for p in left])
                for tp in positions:
                    if tp.offset >= left[tp.partition][1]:
                        del left[tp.partition]
                if left and time.monotonic() - last_progress > self._idle_timeout_s:
                    raise KafkaReadError(
                        f"topic {topic!r}: no progress for {self._idle_timeout_s:.0f}s "
                        f"reading {sorted(left.items())}{self._errors.suffix()}"
                    )
        return newest

    def _new_consumer(self) -> Any:
        from confluent_kafka import Consumer

        self._consumer = Consumer(range_consumer_conf(self._conf, self._errors))
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
