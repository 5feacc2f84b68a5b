"""Committed offsets, kept in the Iceberg table itself.

Every ingest commit carries `tableflow.offsets` in its snapshot summary:
JSON {"topic": ..., "offsets": {"0": next_offset, ...}}. Data and offsets land in
the same commit, so they can never disagree.

Finding them again:
1. walk the ancestry of the current snapshot back to the newest snapshot carrying
   the key (compaction and other rewrite snapshots carry no custom summary);
2. if the walk runs out of snapshots (expired), fall back to the table property
   `tableflow.offsets`, which `maintenance.operations.expire_snapshots` writes
   before expiring anything. See docs/exactly-once.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tableflow_core.errors import TableflowError

if TYPE_CHECKING:
    from pyiceberg.table import Table

OFFSETS_KEY = "tableflow.offsets"
# On the commit of a run that accepted a loss (`on_data_loss: accept`): the offsets that
# were gone from the topic, JSON {"topic": ..., "lost": {"0": [start, end], ...}}.
LOST_OFFSETS_KEY = "tableflow.lost-offsets"


class OffsetStateError(TableflowError, RuntimeError):
    """The stored offsets cannot be used (corrupt JSON, or another topic's offsets)."""


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: int
    parent_id: int | None
    summary: Mapping[str, str]


@dataclass(frozen=True)
class CommittedOffsets:
    topic: str
    offsets: dict[int, int]  # partition -> next offset to read
    snapshot_id: int | None  # the snapshot they were found in (None: table property)
    source: Literal["snapshot", "property"] = "snapshot"
    extra: dict[str, Any] = field(default_factory=dict)


def encode_lost_offsets(topic: str, lost: Mapping[int, tuple[int, int]]) -> str:
    ranges = {str(p): [start, end] for p, (start, end) in sorted(lost.items())}
    return json.dumps({"topic": topic, "lost": ranges}, separators=(",", ":"))


def encode_offsets(topic: str, offsets: Mapping[int, int]) -> str:
    return json.dumps(
        {"topic": topic, "offsets": {str(p): int(o) for p, o in sorted(offsets.items())}},
        separators=(",", ":"),
    )


def decode_offsets(raw: str, where: str) -> tuple[str, dict[int, int]]:
    try:
        data = json.loads(raw)
        return str(data["topic"]), {int(p): int(o) for p, o in data["offsets"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise OffsetStateError(
            f"{where}: {OFFSETS_KEY} is not valid offsets JSON: {raw[:200]!r}"
        ) from exc


def find_committed_offsets(
    current_snapshot_id: int | None,
    snapshots: Iterable[SnapshotInfo],
    properties: Mapping[str, str],
    topic: str | None = None,
) -> CommittedOffsets | None:
    """Pure lookup: newest offsets in the current ancestry, else the table property."""
    by_id = {s.snapshot_id: s for s in snapshots}
    snapshot_id = current_snapshot_id
    found: CommittedOffsets | None = None
    while snapshot_id is not None and snapshot_id in by_id:
        snapshot = by_id[snapshot_id]
        raw = snapshot.summary.get(OFFSETS_KEY)
        if raw is not None:
            stored_topic, offsets = decode_offsets(raw, f"snapshot {snapshot_id}")
            found = CommittedOffsets(stored_topic, offsets, snapshot_id, "snapshot")
            break
        snapshot_id = snapshot.parent_id
    if found is None and OFFSETS_KEY in properties:
        stored_topic, offsets = decode_offsets(properties[OFFSETS_KEY], "table property")
        found = CommittedOffsets(stored_topic, offsets, None, "property")
    if found is not None and topic is not None and found.topic != topic:
        raise OffsetStateError(
            f"the table holds offsets of topic {found.topic!r}, not {topic!r}: "
            "it was filled from another topic"
        )
    return found


def snapshot_infos(metadata: Any) -> list[SnapshotInfo]:
    """The snapshots of pyiceberg `TableMetadata` (summaries without `operation`)."""
    return [
        SnapshotInfo(
            s.snapshot_id,
            s.parent_snapshot_id,
            dict(s.summary.additional_properties) if s.summary is not None else {},
        )
        for s in metadata.snapshots
    ]


def read_committed_offsets(table: Table, topic: str | None = None) -> CommittedOffsets | None:
    """Committed offsets of a pyiceberg table (used by `plan`, no JVM)."""
    metadata = table.metadata
    return find_committed_offsets(
        metadata.current_snapshot_id, snapshot_infos(metadata), dict(metadata.properties), topic
    )
