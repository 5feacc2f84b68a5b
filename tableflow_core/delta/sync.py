"""Write the Delta log matching an Iceberg table's current snapshot (no data copy).

The Delta table lives at the Iceberg table's location: `_delta_log/` beside
`metadata/` and `data/`. Every sync compares the snapshot's live data files with the
Delta table's and commits one Delta version with add actions for new files and
remove actions for files gone (compaction), after an ADD COLUMNS version when the
Iceberg schema gained columns. The last version of a sync records the Iceberg snapshot
it mirrors: the commit info carries `tableflow.iceberg.snapshot-id` and the metadata
location, and the app transaction `tableflow.iceberg` has the snapshot's sequence
number as version. A new snapshot without file changes gets an empty version (so the
recorded snapshot stays current); syncing again the same snapshot writes nothing and
reads no manifest.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tableflow_core.delta.errors import DeltaSyncError
from tableflow_core.delta.files import LiveFile, delta_path, live_data_files, normalize_location
from tableflow_core.delta.schema import added_fields, check_mirrorable, delta_schema

APP_ID = "tableflow.iceberg"
SNAPSHOT_ID_KEY = "tableflow.iceberg.snapshot-id"
METADATA_LOCATION_KEY = "tableflow.iceberg.metadata-location"


@dataclass(frozen=True)
class DeltaSyncResult:
    location: str  # the Delta table root (= the Iceberg table location)
    snapshot_id: int | None  # the Iceberg snapshot the Delta table now mirrors
    version: int  # the Delta table's version after the sync
    committed: bool  # False: the Delta table already matched, nothing written
    created: bool
    files_added: int
    files_removed: int
    columns_added: tuple[str, ...]


def delta_uri(location: str) -> str:
    """Where deltalake opens the table: a local path for file locations, else the URI."""
    return normalize_location(location)


def _add_action(live: LiveFile, data_change: bool) -> Any:
    from deltalake.transaction import AddAction

    return AddAction(
        path=delta_path(live.path),
        size=live.size,
        partition_values={},
        modification_time=live.added_ms,
        data_change=data_change,
        stats=live.stats,
    )


def _commit_properties(table: Any, final: bool) -> Any:
    """Only the final commit of a sync names the snapshot: it is then fully mirrored."""
    from deltalake import CommitProperties
    from deltalake.transaction import Transaction

    snapshot = table.current_snapshot()
    metadata: dict[str, Any] = {METADATA_LOCATION_KEY: table.metadata_location}
    transactions = []
    if snapshot is not None and final:
        metadata[SNAPSHOT_ID_KEY] = str(snapshot.snapshot_id)
        transactions.append(Transaction(APP_ID, int(snapshot.sequence_number or 0)))
    # No blind retry on a concurrent commit: the actions were computed from the Delta
    # table as read; rebasing them could add a file twice. The next sync recomputes.
    return CommitProperties(
        custom_metadata=metadata, app_transactions=transactions or None, max_commit_retries=0
    )


def mirrored_snapshot_id(
    location: str, storage_options: Mapping[str, str] | None = None, history_limit: int = 100
) -> int | None:
    """The Iceberg snapshot id the Delta table at `location` was last synced to (None: none)."""
    from deltalake import DeltaTable

    uri = delta_uri(location)
    if not DeltaTable.is_deltatable(uri, dict(storage_options or {})):
        return None
    table = DeltaTable(uri, storage_options=dict(storage_options or {}))
    for commit in table.history(history_limit):
        raw = commit.get(SNAPSHOT_ID_KEY)
        if raw is not None:
            return int(raw)
    return None


def _is_pure_rewrite(table: Any, previous_snapshot_id: int | None) -> bool:
    """The only change since the last sync is an Iceberg replace (compaction): no data change."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None or previous_snapshot_id is None:
        return False
    return (
        snapshot.parent_snapshot_id == previous_snapshot_id
        and str(snapshot.summary.operation.value) == "replace"
    )


def sync_delta_log(
    table: Any,
    *,
    storage_options: Mapping[str, str] | None = None,
) -> DeltaSyncResult:
    """Make the Delta log at the table's location match `table`'s current snapshot.

    `table` is a pyiceberg Table (load it fresh: the current snapshot is mirrored).
    Raises DeltaSyncError (before writing anything) when the table cannot be read as
    Delta: delete files, renamed/retyped/dropped columns, unsupported types; and when
    another writer committed to the Delta log meanwhile (the file actions are not
    committed then; syncing again recomputes them from the new state).
    """
    from deltalake.exceptions import CommitFailedError

    try:
        return _sync(table, dict(storage_options or {}))
    except CommitFailedError as exc:
        raise DeltaSyncError(
            f"the Delta log at {table.metadata.location} changed while syncing ({exc}); sync again"
        ) from exc


def _sync(table: Any, options: dict[str, str]) -> DeltaSyncResult:
    from deltalake import DeltaTable
    from deltalake.transaction import RemoveAction, create_table_with_add_actions

    current_schema = table.schema()
    check_mirrorable(table.schemas().values(), current_schema)
    desired = delta_schema(current_schema)
    location = table.metadata.location
    uri = delta_uri(location)
    snapshot = table.current_snapshot()
    snapshot_id = snapshot.snapshot_id if snapshot is not None else None

    if not DeltaTable.is_deltatable(uri, options):
        files = live_data_files(table)
        create_table_with_add_actions(
            uri,
            desired,
            [_add_action(f, True) for f in files.values()],
            mode="error",
            name=".".join(table.name()),
            storage_options=options,
            commit_properties=_commit_properties(table, final=True),
        )
        created = DeltaTable(uri, storage_options=options)
        if _list_implied_features(created, table):
            created = DeltaTable(uri, storage_options=options)
        return DeltaSyncResult(
            location, snapshot_id, created.version(), True, True, len(files), 0, ()
        )

    previous = mirrored_snapshot_id(location, options)
    delta = DeltaTable(uri, storage_options=options)
    if _list_implied_features(delta, table):  # mirrors written before the fix too
        delta = DeltaTable(uri, storage_options=options)
    new_fields = added_fields(delta.schema(), desired)
    if previous is not None and previous == snapshot_id and not new_fields:
        # The last complete sync was of this very snapshot: no manifest to read.
        return DeltaSyncResult(location, previous, delta.version(), False, False, 0, 0, ())
    files = live_data_files(table)
    actions = _pyarrow_table(delta.get_add_actions(flatten=False)).to_pylist()
    existing = {str(a["path"]): int(a["size_bytes"]) for a in actions}
    to_add = sorted(set(files) - set(existing))
    to_remove = sorted(set(existing) - set(files))
    if not (new_fields or to_add or to_remove) and previous == snapshot_id:
        return DeltaSyncResult(location, previous, delta.version(), False, False, 0, 0, ())

    if new_fields:
        delta.alter.add_columns(
            new_fields, commit_properties=_commit_properties(table, final=False)
        )
        delta = DeltaTable(uri, storage_options=options)
        if _list_implied_features(delta, table):  # a new timestamp column lifts it to 7
            delta = DeltaTable(uri, storage_options=options)
    # The final commit records the snapshot, even when only the snapshot id moved (a commit
    # without file changes): an empty version, so the next sync can skip the manifests.
    data_change = not _is_pure_rewrite(table, previous)
    now_ms = int(time.time() * 1000)
    file_actions: list[Any] = [_add_action(files[p], data_change) for p in to_add]
    file_actions += [
        RemoveAction(delta_path(p), data_change, now_ms, existing[p], {}) for p in to_remove
    ]
    delta.create_write_transaction(
        file_actions,
        "append",
        delta.schema(),
        commit_properties=_commit_properties(table, final=True),
    )
    delta = DeltaTable(uri, storage_options=options)
    return DeltaSyncResult(
        location,
        snapshot_id,
        delta.version(),
        True,
        False,
        len(to_add),
        len(to_remove),
        tuple(f.name for f in new_fields),
    )


def _list_implied_features(delta: Any, table: Any) -> bool:
    """List `invariants` among the writer features once the protocol is at writer version 7.

    delta-rs lifts the protocol to (3, 7) for a timestamp-without-zone column and lists
    only `timestampNtz`; at writer version 7 every feature in use must be listed, and a
    NOT NULL column (an Iceberg `required` field, a key) implies `invariants`: delta-spark
    (and Databricks) refuse such a table with DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH.
    The feature is harmless without NOT NULL columns, so it is listed whenever the
    protocol is at version 7. A commit of its own, without the snapshot marker (the
    previous marker still holds); True when one was made.
    """
    from deltalake import TableFeatures

    protocol = delta.protocol()
    if protocol.min_writer_version < 7 or "invariants" in (protocol.writer_features or []):
        return False
    delta.alter.add_feature(
        TableFeatures.Invariants,
        allow_protocol_versions_increase=True,
        commit_properties=_commit_properties(table, final=False),
    )
    return True


def _pyarrow_table(arrow: Any) -> Any:
    import pyarrow as pa

    return pa.table(arrow)
