"""What a table's commits wrote, read from its metadata: what decides whether compaction
is due besides the clock (`schedule.py`).

Read from the snapshot summaries of `main`'s ancestry (and the current snapshot's totals:
the delete files readers apply, `delete_load.py`). No manifest is opened (plan and
`maintain --dry-run` stay one catalog request per table), except on a table that has
delete files: its manifests are listed for the rows of the data files that carry them
(what readers pay for and a compaction would rewrite; no data or delete file is read).
Per commit that added files: when, how many data and delete files, how many bytes. Rewrites (`replace` snapshots:
compaction, delete and manifest rewrites) add no new work and are not counted; the walk
stops at the last rewrite that removed data files (a compaction, by tableflow or anyone).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# Beyond this many snapshots the walk stops: older commits are old enough for the
# time trigger anyway.
MAX_WALK = 10_000
_REPLACE = "replace"


@dataclass(frozen=True)
class FileCommit:
    """One commit that added files to `main`."""

    committed_at: datetime
    data_files: int
    delete_files: int
    bytes: int  # added-files-size: every file the commit added

    def small_files(self, below_bytes: int) -> int:
        """The commit's data files if they average under `below_bytes`, else 0 (the
        summary has the count and total size, not each file's)."""
        if self.data_files == 0:
            return 0
        return self.data_files if self.bytes / self.data_files < below_bytes else 0


@dataclass(frozen=True)
class TableActivity:
    """The table's data files now, and the commits since its last compaction."""

    data_files: int  # total-data-files of the current snapshot
    commits: tuple[FileCommit, ...] = ()  # newest first
    # What readers apply to the data files now (the current snapshot's totals): position
    # delete files, the rows they delete, the rows of the data files (deleted included).
    delete_files: int = 0
    deleted_rows: int = 0
    records: int = 0
    # The rows of the data files that carry at least one delete file (None: not read).
    rows_with_deletes: int | None = None
    # When each snapshot the metadata holds was committed, newest first (expiry's count).
    snapshot_times: tuple[datetime, ...] = ()

    def since(self, moment: datetime | None) -> tuple[FileCommit, ...]:
        """The commits after `moment` (all of them when None)."""
        if moment is None:
            return self.commits
        return tuple(c for c in self.commits if c.committed_at > moment)


def _summary_int(summary: Any, key: str) -> int:
    if summary is None:
        return 0
    try:
        return int(summary.additional_properties.get(key, 0))
    except (TypeError, ValueError):
        return 0


def _operation(summary: Any) -> str:
    operation = getattr(summary, "operation", None)
    return str(getattr(operation, "value", operation) or "")


def rows_with_deletes(table: Any) -> int | None:
    """The rows of the data files a reader applies delete files to, from the current
    snapshot's manifests (what pyiceberg's scan plans, planned here without its catalog:
    plan's embedded reader is not one; None: they cannot be read)."""
    from pyiceberg.table import DataScan  # here: the pure schedule imports this module

    try:
        tasks = DataScan(table_metadata=table.metadata, io=table.io).plan_files()
        return sum(t.file.record_count for t in tasks if t.delete_files)
    except OSError:
        return None


def data_file_sizes(table: Any) -> list[list[int]]:
    """Each partition's data file sizes in a pyiceberg table's current snapshot, from its
    data manifests (what compaction's tiers are chosen by, `tiers.py`)."""
    from pyiceberg.manifest import ManifestContent  # here: the pure schedule imports this module

    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    sizes: dict[tuple[int, tuple[Any, ...]], list[int]] = {}
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            key = (manifest.partition_spec_id, tuple(entry.data_file.partition))
            sizes.setdefault(key, []).append(entry.data_file.file_size_in_bytes)
    return list(sizes.values())


def table_activity(table: Any) -> TableActivity:
    """A pyiceberg table's activity (its loaded metadata; its manifests too when it has
    delete files, `rows_with_deletes`)."""
    metadata = table.metadata
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    current = by_id.get(metadata.current_snapshot_id) if metadata.current_snapshot_id else None
    data_files = _summary_int(current.summary, "total-data-files") if current else 0
    commits: list[FileCommit] = []
    snapshot = current
    for _ in range(MAX_WALK):
        if snapshot is None:
            break
        summary = snapshot.summary
        if _operation(summary) == _REPLACE:
            if _summary_int(summary, "deleted-data-files") > 0:
                break  # a compaction: the commits before it were compacted
        else:
            added = _summary_int(summary, "added-data-files")
            deletes = _summary_int(summary, "added-delete-files")
            if added or deletes:
                commits.append(
                    FileCommit(
                        committed_at=datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC),
                        data_files=added,
                        delete_files=deletes,
                        bytes=_summary_int(summary, "added-files-size"),
                    )
                )
        snapshot = by_id.get(snapshot.parent_snapshot_id)
    times = sorted(
        (datetime.fromtimestamp(s.timestamp_ms / 1000, UTC) for s in metadata.snapshots),
        reverse=True,
    )
    summary = current.summary if current else None
    delete_files = _summary_int(summary, "total-delete-files")
    return TableActivity(
        data_files=data_files,
        commits=tuple(commits),
        snapshot_times=tuple(times),
        delete_files=delete_files,
        deleted_rows=_summary_int(summary, "total-position-deletes"),
        records=_summary_int(summary, "total-records"),
        rows_with_deletes=rows_with_deletes(table) if delete_files else None,
    )
