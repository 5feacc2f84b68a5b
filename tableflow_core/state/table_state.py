"""A table's snapshots, refs and properties: what a run checks before and after it writes.

Two readers give the same `TableState`:
- `table_state_of`: of pyiceberg table metadata (one catalog request to load the table,
  no Spark job). `ingest` uses it (it always has the target's catalog handle).
- `read_table_state`: Spark's metadata tables (three small Spark jobs), for callers that
  only hold a SparkSession (maintenance, tests).
Only metadata reaches the driver (a few rows per snapshot), never data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tableflow_core.state.offsets import (
    CommittedOffsets,
    SnapshotInfo,
    find_committed_offsets,
    snapshot_infos,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class TableState:
    current_snapshot_id: int | None
    snapshots: tuple[SnapshotInfo, ...]
    refs: dict[str, int]  # ref name -> snapshot id (branches and tags)
    properties: dict[str, str]

    def committed_offsets(self, topic: str | None = None) -> CommittedOffsets | None:
        return find_committed_offsets(
            self.current_snapshot_id, self.snapshots, self.properties, topic
        )

    def latest_on_main(self, key: str) -> str | None:
        """Summary property `key` of the newest snapshot of main's history that has it
        (a maintenance commit after a run does not hide what the run recorded)."""
        summaries = {s.snapshot_id: s.summary for s in self.snapshots}
        for snapshot_id in self.ancestors_of(self.current_snapshot_id):
            value = summaries[snapshot_id].get(key)
            if value is not None:
                return str(value)
        return None

    def ancestors_of(self, snapshot_id: int | None) -> list[int]:
        """`snapshot_id` and its ancestors still in the metadata, newest first."""
        parents = {s.snapshot_id: s.parent_id for s in self.snapshots}
        chain: list[int] = []
        while snapshot_id is not None and snapshot_id in parents:
            chain.append(snapshot_id)
            snapshot_id = parents[snapshot_id]
        return chain


def table_exists(spark: SparkSession, identifier: str) -> bool:
    return bool(spark.catalog.tableExists(identifier))


def read_table_state(spark: SparkSession, identifier: str) -> TableState:
    # Three reads, not one: refs first. Snapshots are only ever added (between two reads;
    # expiry is maintenance itself), so main's snapshot read first is in the list read
    # after it. The other order misses a publish landing in between: one commit adds the
    # snapshot and moves main to it (engine/run_branch.py).
    refs = {
        str(row.name): int(row.snapshot_id)
        for row in spark.sql(f"SELECT name, snapshot_id FROM {identifier}.refs").collect()
    }
    snapshots = tuple(
        SnapshotInfo(int(row.snapshot_id), row.parent_id, dict(row.summary or {}))
        for row in spark.sql(
            f"SELECT snapshot_id, parent_id, summary FROM {identifier}.snapshots"
        ).collect()
    )
    properties = {
        str(row.key): str(row.value)
        for row in spark.sql(f"SHOW TBLPROPERTIES {identifier}").collect()
    }
    return TableState(refs.get("main"), snapshots, refs, properties)


def table_state_of(metadata: Any) -> TableState:
    """`TableState` of pyiceberg `TableMetadata`."""
    refs = {str(name): int(ref.snapshot_id) for name, ref in metadata.refs.items()}
    return TableState(
        refs.get("main"), tuple(snapshot_infos(metadata)), refs, dict(metadata.properties)
    )
