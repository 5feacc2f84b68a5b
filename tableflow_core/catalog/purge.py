"""Deleting a dropped table's files (`DELETE ...?purgeRequested=true`), confined to the table.

pyiceberg's `purge_table` deletes every path the table's metadata and manifests name.
Those paths come from clients: `add_files` puts any file in a manifest, so a purge
deleted files outside the warehouse, or another table's. Here a file is deleted only
if it lies under the table's own locations (its `location` and `write.*.path`
properties) *and* is allowed by the catalog's policy, both checked with symbolic links
resolved, right before the delete, *and* lies under no other table's places (its
location and `write.*.path` properties, `catalog/placement.py`): a table placed over
another one (before the catalog refused that) does not take the other's files with it.
Manifest lists and manifests outside those places are not even read. What is kept is
counted and logged. Files are deleted one by one, never a prefix.

As in Iceberg's `CatalogUtil.dropTableData`, `gc.enabled=false` keeps the data and
delete files (a table that may share files with another) and deletes only metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile, read_manifest_list
from pyiceberg.table.metadata import TableMetadata

from tableflow_core.catalog.errors import BadRequestError
from tableflow_core.catalog.locations import LocationPolicy
from tableflow_core.catalog.placement import PlacedTable, place_of, table_policy

log = logging.getLogger(__name__)

GC_ENABLED = "gc.enabled"


@dataclass
class PurgeResult:
    deleted: int = 0
    kept_outside: list[str] = field(default_factory=list)  # named by the table, not its own
    failed: int = 0


@dataclass
class _Purge:
    io: FileIO
    allowed: LocationPolicy  # the catalog's policy
    own: LocationPolicy  # the table's own locations
    others: Sequence[PlacedTable] = ()  # every other table of the catalog
    result: PurgeResult = field(default_factory=PurgeResult)

    def is_own(self, path: str) -> bool:
        return self.own.allows(path) and self.allowed.allows(path) and not self.is_others(path)

    def is_others(self, path: str) -> bool:
        try:
            place = place_of(path)
        except BadRequestError:
            return True  # not comparable: not ours to delete
        return any(place.startswith(theirs) for other in self.others for theirs in other.places)

    def readable(self, path: str) -> bool:
        if self.is_own(path):
            return True
        self.result.kept_outside.append(path)
        return False

    def delete(self, paths: Iterable[str]) -> None:
        for path in dict.fromkeys(paths):  # once each, in order
            if not self.is_own(path):  # checked again right before deleting
                self.result.kept_outside.append(path)
                continue
            try:
                self.io.delete(path)
                self.result.deleted += 1
            except OSError:
                self.result.failed += 1
                log.warning("purge: could not delete %s", path)


def purge_files(
    metadata: TableMetadata,
    metadata_location: str,
    io: FileIO,
    allowed: LocationPolicy,
    others: Sequence[PlacedTable] = (),
) -> PurgeResult:
    """Delete the files of a table already dropped from the catalog (best effort);
    `others`: the catalog's other tables, whose files are kept."""
    purge = _Purge(io, allowed, table_policy(metadata.location, metadata.properties), others)
    manifest_lists = [s.manifest_list for s in metadata.snapshots if s.manifest_list]
    manifests: dict[str, ManifestFile] = {}
    for manifest_list in filter(purge.readable, dict.fromkeys(manifest_lists)):
        try:
            snapshot_manifests = _read_manifest_list(io, manifest_list)
        except Exception:
            purge.result.failed += 1
            log.warning("purge: could not read manifest list %s", manifest_list)
            continue
        for manifest in snapshot_manifests:
            if purge.readable(manifest.manifest_path):
                manifests.setdefault(manifest.manifest_path, manifest)
    if metadata.properties.get(GC_ENABLED, "true").strip().lower() != "false":
        purge.delete(_content_files(io, manifests.values(), purge.result))
    purge.delete(manifests)
    purge.delete(manifest_lists)
    purge.delete(s.statistics_path for s in metadata.statistics)
    purge.delete(s.statistics_path for s in metadata.partition_statistics)
    purge.delete([entry.metadata_file for entry in metadata.metadata_log])
    purge.delete([metadata_location])
    if purge.result.kept_outside:
        log.warning(
            "purge of the table at %s kept %d file(s) outside its locations, e.g. %s",
            metadata.location,
            len(purge.result.kept_outside),
            purge.result.kept_outside[0],
        )
    return purge.result


def _read_manifest_list(io: FileIO, manifest_list: str) -> list[ManifestFile]:
    return list(read_manifest_list(io.new_input(manifest_list)))


def _content_files(
    io: FileIO, manifests: Iterable[ManifestFile], result: PurgeResult
) -> Iterable[str]:
    """Data and delete file paths of `manifests`, deleted entries included."""
    for manifest in manifests:
        try:
            entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
        except Exception:
            result.failed += 1
            log.warning("purge: could not read manifest %s", manifest.manifest_path)
            continue
        yield from (entry.data_file.file_path for entry in entries)
