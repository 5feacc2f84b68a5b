"""What the metrics read from outside after a cycle: each table's lag (the code of
`tableflow status`) and the newest Kafka timestamp a commit took in (its freshness).

They run in the observer's own thread (`observer.py`), never in the scheduler's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tableflow_core.config.project import Project, Table
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.kafka.range_reader import RangeReader
from tableflow_core.observability.metrics import TableCommit
from tableflow_core.plan.world import KAFKA_TIMEOUT_S, Readers, default_readers
from tableflow_core.state.offsets import read_committed_offsets
from tableflow_core.targets.kafka import kafka_consumer_config
from tableflow_core.tasks.status import committed_offsets, table_lag

# The last records of each partition a commit advanced, read for their timestamps (a
# transactional topic ends with a control record, which has none to give).
TAIL_RECORDS = 16


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

    def read(
        self, catalog: Any, tables: Iterable[Table], commits: Mapping[str, TableCommit]
    ) -> list[TableReading]:
        """A reading per table (a table that cannot be read gives what could be)."""
        watermarks: dict[str, Any] = {}
        readings = []
        for table in tables:
            readings.append(self._one(catalog, table, commits.get(table.name), watermarks))
        return readings

    def _one(
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
        lag = None
        try:
            if table.topic not in watermarks:
                watermarks[table.topic] = self._io.get_watermarks(
                    self._kafka_conf, table.topic, KAFKA_TIMEOUT_S
                )
            partitions = table_lag(
                table, committed, watermarks[table.topic], self._io, self._kafka_conf
            )
            lag = sum(p.lag for p in partitions)
        except Exception:
            watermarks.pop(table.topic, None)
        last_commit_s = None
        found = read_committed_offsets(iceberg) if iceberg is not None else None
        if found is not None and found.snapshot_id is not None:  # the last data commit's
            snapshot = iceberg.snapshot_by_id(found.snapshot_id)
            last_commit_s = snapshot.timestamp_ms / 1000 if snapshot is not None else None
        freshness = None
        if commit is not None and iceberg is not None:
            freshness = self._freshness(iceberg, table, commit)
        return TableReading(table.name, lag, last_commit_s, freshness)

    def _freshness(self, iceberg: Any, table: Table, commit: TableCommit) -> float | None:
        snapshot = iceberg.snapshot_by_id(commit.snapshot_id)
        if snapshot is None:
            return None
        ranges = {
            partition: (max(commit.offsets_before.get(partition, 0), end - TAIL_RECORDS), end)
            for partition, end in commit.offsets_after.items()
            if end > commit.offsets_before.get(partition, 0)
        }
        if not ranges:
            return None
        read = self.newest_timestamp_ms or self._newest_timestamp_ms
        try:
            newest = read(table.topic, ranges)
        except Exception:
            return None
        if newest is None:
            return None
        return max(0.0, (snapshot.timestamp_ms - newest) / 1000)

    def _newest_timestamp_ms(self, topic: str, ranges: Mapping[int, tuple[int, int]]) -> int | None:
        newest: int | None = None
        with RangeReader(self._kafka_conf, idle_timeout_s=10.0, topics=[topic]) as reader:
            for partition, (start, end) in sorted(ranges.items()):
                for chunk in reader.read(OffsetRange(topic, partition, start, end)):
                    stamps = [t for t in chunk.timestamps_ms if t is not None and t >= 0]
                    if stamps:
                        newest = max(stamps + ([newest] if newest is not None else []))
        return newest
