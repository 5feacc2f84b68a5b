"""pyiceberg transactions whose staged metadata is computed once per staged change.

pyiceberg 0.12's `Transaction.table_metadata` applies every staged update to the table's
metadata and deep-copies the result on each access, and a commit reads it dozens of times
(a snapshot producer's set-up, its summary and manifests, each ref change). The copy
costs in proportion to the snapshots the table keeps: ~32 ms at 343 snapshots. In the
accelerated soak of `tableflow run` (one table, a commit a second) it was 74% of the
driver's samples at 300 snapshots, and a commit's cadence slowed from 0.92 s to 1.71 s as
history grew to its default bound (benchmarks/soak.py; docs/production.md). Every
commit `run` makes goes through here: the run's (engine/run_branch.py), the dead-letter
table's driver append, `apply_deletes`' rewrite and an upsert table's deletes-table
append (py-spy on the 10-table soak: pyiceberg's copy was ~30% of `apply_deletes`' CPU;
the deletes-table append, a table load included, 300-349 -> 57-63 ms of CPU at ~420
snapshots: benchmarks/staged_append.py).

The metadata models are frozen (pydantic `frozen=True`) and every update handler builds
new containers (`model_copy(update=...)`), so the deep copy only guards against a
mutation nothing does: here the staged metadata is the updates applied by pyiceberg's own
handlers, without the copy, computed once per staged state and shared by its readers; it
is computed again only when the transaction stages another change or a retry refreshed
the table. It leans on pyiceberg's private `_apply_table_update`;
tests/unit/test_transactions.py compares it with `update_table_metadata`, so an upgrade
that changes them fails there first.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pyiceberg.table import StagedTable, Transaction
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.utils.datetime import datetime_to_millis


class StagedTransaction(Transaction):
    """A `Transaction` computing its staged metadata once per (table metadata, updates)."""

    _staged: tuple[Any, Any, TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        staged = self._staged
        if staged is None or staged[0] is not base or staged[1] is not updates:
            staged = (base, updates, staged_metadata(base, updates))
            self._staged = staged
        return staged[2]


def staged_metadata(
    base: TableMetadata, updates: tuple[TableUpdate, ...], metadata_location: str | None = None
) -> TableMetadata:
    """`update_table_metadata(base, updates, metadata_location=...)` without its final deep
    copy (`metadata_location`: the table's current file, logged in the metadata log)."""
    context = _TableMetadataUpdateContext()
    metadata = base
    for update in updates:
        metadata = _apply_table_update(update, metadata, context)
    if context.has_changes() and metadata_location:
        metadata = _update_table_metadata_log(metadata, metadata_location, base.last_updated_ms)
    if context.has_changes() and base.last_updated_ms == metadata.last_updated_ms:
        now = datetime_to_millis(datetime.now().astimezone())
        metadata = metadata.model_copy(update={"last_updated_ms": now})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata


def stage_table(
    catalog: Any,
    current: Any,
    identifier: tuple[str, ...],
    requirements: tuple[Any, ...],
    updates: tuple[TableUpdate, ...],
) -> StagedTable:
    """pyiceberg's `MetastoreCatalog._update_and_stage_table` for a catalog's commit to an
    existing table, the new metadata staged without the deep copy (a new table, validated
    whole, goes through pyiceberg's own)."""
    if current is None:
        return catalog._update_and_stage_table(current, identifier, requirements, updates)
    for requirement in requirements:
        requirement.validate(current.metadata)
    metadata = staged_metadata(current.metadata, updates, current.metadata_location)
    version = catalog._parse_metadata_version(current.metadata_location) + 1
    provider = load_location_provider(metadata.location, metadata.properties)
    location = provider.new_table_metadata_file_location(version)
    return StagedTable(
        identifier=identifier,
        metadata=metadata,
        metadata_location=location,
        io=catalog._load_file_io(properties=metadata.properties, location=location),
        catalog=catalog,
    )


def transaction(table: Any) -> Transaction:
    """`table.transaction()` (pyiceberg `Table`) with the staged metadata computed once."""
    return StagedTransaction(table)
