"""A snapshot that adds data files and position delete files at once: Iceberg's RowDelta.

pyiceberg 0.12 (pinned in pyproject.toml) writes data files and appends them, but has no
RowDelta: this producer is its merge append with one more manifest, a DELETES manifest
listing the position delete files (`content: deletes` in its Avro metadata and in the
manifest list). The manifest list gives the new entries the snapshot's sequence number;
a position delete file names its data files by path, so it never touches the data file
added beside it. The snapshot's operation is `overwrite`, as Java's RowDelta with data and
deletes; its summary counts the delete files (`added-delete-files`,
`added-position-deletes`).

It leans on pyiceberg's private `_MergeAppendFiles` and `ManifestWriterV2`;
tests/unit/test_upsert_rows.py writes a snapshot with it and reads it back, so a pyiceberg
upgrade that changes them fails there first. Like a fast append it validates nothing
against concurrent commits: the caller's transaction must assert where `main` is
(`engine/run_branch.publish_run` does), since position deletes are only right against
the snapshot they were computed from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.table.snapshots import (
    Operation,
    SnapshotSummaryCollector,
    Summary,
    update_snapshot_summaries,
)
from pyiceberg.table.update.snapshot import _MergeAppendFiles


class _DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def added_entry(snapshot_id: int, data_file: DataFile) -> ManifestEntry:
    """A manifest entry for a file `snapshot_id` adds (its sequence numbers inherited from
    the snapshot when the manifest list is written)."""
    return ManifestEntry.from_args(
        status=ManifestEntryStatus.ADDED,
        snapshot_id=snapshot_id,
        sequence_number=None,
        file_sequence_number=None,
        data_file=data_file,
    )


class RowDelta(_MergeAppendFiles):
    """An append of data files plus position delete files, in one snapshot (its data
    manifests merged as a merge append's, by the table's `commit.manifest-merge.*`)."""

    def __init__(
        self,
        transaction: Any,
        io: Any,
        delete_files: Sequence[Any],
        snapshot_properties: dict[str, str],
        branch: str,
    ) -> None:
        super().__init__(
            operation=Operation.OVERWRITE,
            transaction=transaction,
            io=io,
            snapshot_properties=snapshot_properties,
            branch=branch,
        )
        for delete_file in delete_files:
            if delete_file.content != DataFileContent.POSITION_DELETES:
                raise ValueError(f"not a position delete file: {delete_file.file_path}")
        self._delete_files = list(delete_files)

    def _manifests(self) -> list[ManifestFile]:
        manifests: list[ManifestFile] = super()._manifests()
        if not self._delete_files:
            return manifests
        metadata = self._transaction.table_metadata
        if metadata.format_version != 2:
            raise ValueError(
                f"position delete files are written for format version 2 tables, this table "
                f"is version {metadata.format_version}"
            )
        writer = _DeleteManifestWriter(
            metadata.spec(),
            metadata.schema(),
            self.new_manifest_output(),
            self._snapshot_id,
            self._compression,
        )
        with writer:
            for delete_file in self._delete_files:
                writer.add(added_entry(self._snapshot_id, delete_file))
        return [writer.to_manifest_file(), *manifests]

    def _summary(self, snapshot_properties: dict[str, str] | None = None) -> Summary:
        metadata = self._transaction.table_metadata
        collector = SnapshotSummaryCollector()
        for added in (*self._added_data_files, *self._delete_files):
            collector.add_file(added, schema=metadata.schema(), partition_spec=metadata.spec())
        parent = (
            metadata.snapshot_by_id(self._parent_snapshot_id)
            if self._parent_snapshot_id is not None
            else None
        )
        return update_snapshot_summaries(
            summary=Summary(
                operation=self._operation, **collector.build(), **(snapshot_properties or {})
            ),
            previous_summary=parent.summary if parent is not None else None,
        )
