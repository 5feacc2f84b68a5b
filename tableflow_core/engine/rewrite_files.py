"""A snapshot that replaces data files and drops delete files: Iceberg's RewriteFiles.

pyiceberg 0.12 (pinned in pyproject.toml) has no rewrite that removes delete files: its
overwrite writes every removed entry into a data manifest and rewrites delete manifests
as data manifests. This producer (operation `replace`, as Java's RewriteFiles):

- keeps every manifest of the parent snapshot that holds none of the removed files;
- rewrites each one that does with the same content (data or deletes), its other
  entries EXISTING with their sequence numbers, the removed ones DELETED;
- adds the new data files in a manifest of their own partition spec, with the new
  snapshot's sequence number: a position delete file names its data file by path, so no
  delete file of the parent applies to them, and the ones committed later do (higher
  sequence numbers);
- refuses (`ValidationException`) when a removed file is not live in the parent, and on
  any retry after the catalog refused the commit: a snapshot committed meanwhile may
  have added delete files against the files rewritten here, which this rewrite would
  drop with them (a deleted row resurrected). The caller tries again from the new head.

Its summary counts what was added and removed (`deleted-data-files`,
`removed-position-delete-files`...) with the totals carried forward.

It leans on pyiceberg's private `_SnapshotProducer`, manifest writers and the summary
collector; tests/unit/test_rewrite_files.py commits with it and reads back, so a pyiceberg
upgrade that changes them fails there first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pyiceberg.exceptions import ValidationException
from pyiceberg.manifest import (
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
)
from pyiceberg.table.snapshots import (
    Operation,
    SnapshotSummaryCollector,
    Summary,
    update_snapshot_summaries,
)
from pyiceberg.table.update.snapshot import _SnapshotProducer

from tableflow_core.engine.row_delta import _DeleteManifestWriter, added_entry


class RewriteFiles(_SnapshotProducer["RewriteFiles"]):
    """`removed` data files and delete files replaced by `added` data files (same rows), in
    one `replace` snapshot on `branch`."""

    def __init__(
        self,
        transaction: Any,
        io: Any,
        removed: Sequence[Any],
        added: Sequence[Any],
        branch: str = "main",
    ) -> None:
        super().__init__(operation=Operation.REPLACE, transaction=transaction, io=io, branch=branch)
        for data_file in added:
            if data_file.content != DataFileContent.DATA:
                raise ValueError(f"not a data file: {data_file.file_path}")
        for data_file in removed:
            if data_file.content == DataFileContent.EQUALITY_DELETES:
                raise ValueError(f"equality delete files are not rewritten: {data_file.file_path}")
        self._removed = {f.file_path: f for f in removed}
        self._added = list(added)

    def _validate_concurrency(self) -> None:
        """Called by pyiceberg before a retry: never retried (module docstring)."""
        if self._parent_snapshot_id != self._starting_snapshot_id:
            raise ValidationException(
                f"the branch moved from {self._starting_snapshot_id} to "
                f"{self._parent_snapshot_id} during the rewrite: not committed"
            )

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []  # written by `_manifests`, in the rewritten manifests

    def _existing_manifests(self) -> list[ManifestFile]:
        return []  # the same

    def _writer(self, manifest: ManifestFile) -> ManifestWriter:
        metadata = self._transaction.table_metadata
        spec = metadata.specs()[manifest.partition_spec_id]
        if manifest.content == ManifestContent.DELETES:
            return _DeleteManifestWriter(
                spec, metadata.schema(), self.new_manifest_output(), self._snapshot_id,
                self._compression,
            )  # fmt: skip
        return self.new_manifest_writer(spec)

    def _filtered(self, manifest: ManifestFile, found: set[str]) -> ManifestFile | None:
        """`manifest` without the removed files (None: it holds none of them, kept)."""
        entries = manifest.fetch_manifest_entry(io=self._io, discard_deleted=True)
        if not any(e.data_file.file_path in self._removed for e in entries):
            return None
        with self._writer(manifest) as writer:
            for entry in entries:
                removed = entry.data_file.file_path in self._removed
                if removed:
                    found.add(entry.data_file.file_path)
                writer.add_entry(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.DELETED if removed else ManifestEntryStatus.EXISTING,
                        snapshot_id=self._snapshot_id if removed else entry.snapshot_id,
                        sequence_number=entry.sequence_number,
                        file_sequence_number=entry.file_sequence_number,
                        data_file=entry.data_file,
                    )
                )  # fmt: skip
        return writer.to_manifest_file()

    def _manifests(self) -> list[ManifestFile]:
        self._validate_concurrency()
        metadata = self._transaction.table_metadata
        parent = (
            metadata.snapshot_by_id(self._parent_snapshot_id)
            if self._parent_snapshot_id is not None
            else None
        )
        if parent is None:
            raise ValidationException("a rewrite needs a snapshot to rewrite")
        manifests: list[ManifestFile] = []
        by_spec: dict[int, list[Any]] = defaultdict(list)
        for data_file in self._added:
            by_spec[data_file.spec_id].append(data_file)
        for spec_id, files in by_spec.items():
            with self.new_manifest_writer(metadata.specs()[spec_id]) as writer:
                for data_file in files:
                    writer.add(added_entry(self._snapshot_id, data_file))
            manifests.append(writer.to_manifest_file())
        found: set[str] = set()
        for manifest in parent.manifests(self._io):
            filtered = self._filtered(manifest, found)
            manifests.append(manifest if filtered is None else filtered)
        missing = sorted(set(self._removed) - found)
        if missing:
            raise ValidationException(f"files to rewrite are not in the table: {missing[:3]}")
        return manifests

    def _summary(self, snapshot_properties: dict[str, str] | None = None) -> Summary:
        metadata = self._transaction.table_metadata
        schema, specs = metadata.schema(), metadata.specs()
        collector = SnapshotSummaryCollector()
        for data_file in self._added:
            collector.add_file(data_file, schema=schema, partition_spec=specs[data_file.spec_id])
        for data_file in self._removed.values():
            collector.remove_file(data_file, schema=schema, partition_spec=specs[data_file.spec_id])
        parent = (
            metadata.snapshot_by_id(self._parent_snapshot_id)
            if self._parent_snapshot_id is not None
            else None
        )
        # pyiceberg carries the totals forward for overwrites only; a replace's are the same.
        totals = update_snapshot_summaries(
            summary=Summary(operation=Operation.OVERWRITE, **collector.build()),
            previous_summary=parent.summary if parent is not None else None,
        )
        return Summary(operation=Operation.REPLACE, **totals.additional_properties)
