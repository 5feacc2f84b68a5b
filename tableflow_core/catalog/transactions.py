"""pyiceberg transactions whose staged metadata is computed once per staged change.

pyiceberg 0.12's `Transaction.table_metadata` applies every staged update to the table's
metadata and deep-copies the result on each access, and a commit reads it dozens of times
(a snapshot producer's set-up, its summary and manifests, each ref change). The copy
costs in proportion to the snapshots the table keeps: ~32 ms at 343 snapshots. In the
accelerated soak of `tableflow run` (one table, a commit a second) it was 74% of the
driver's samples at 300 snapshots, and a commit's cadence slowed from 0.92 s to 1.71 s as
history grew to its default bound (benchmarks/soak.py; docs/production.md).

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

from pyiceberg.table import Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
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


def staged_metadata(base: TableMetadata, updates: tuple[TableUpdate, ...]) -> TableMetadata:
    """`update_table_metadata(base, updates)` without its final deep copy."""
    context = _TableMetadataUpdateContext()
    metadata = base
    for update in updates:
        metadata = _apply_table_update(update, metadata, context)
    if context.has_changes() and base.last_updated_ms == metadata.last_updated_ms:
        now = datetime_to_millis(datetime.now().astimezone())
        metadata = metadata.model_copy(update={"last_updated_ms": now})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata


def transaction(table: Any) -> Transaction:
    """`table.transaction()` (pyiceberg `Table`) with the staged metadata computed once."""
    return StagedTransaction(table)
