"""The run's private branch as catalog commits, through pyiceberg's public API.

A run costs two commits of its own beside the data Spark writes (docs/exactly-once.md):
- `start_run`: the run's branch at main's head, in the same commit the table's first
  snapshot when it has none, and the removal of run branches that can never be published;
- `publish_run`: the accounting snapshot (offsets, accounting, the stages' reports) on the
  run's branch, `main` moved to it, and the run's branch and the other run branches seen
  before the run removed, in one commit that the catalog accepts only while `main` is
  still at the snapshot the run branched from.

pyiceberg keeps one requirement of each kind per transaction: the first one staged.
`publish_run` therefore stages main's requirement first (setting `main` to where it is,
which changes nothing in the metadata); later ref updates (the branch's, main's move)
add no requirement of their own. pyiceberg retries a transaction that carries a snapshot
after a `CommitFailedException`, rebuilding only the snapshot on its target branch (here
the run's branch, never `main`): such a retry cannot publish anything, and the result is
checked after the commit (main must be at the accounting snapshot) either way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tableflow_core.catalog.transactions import transaction as transaction_of
from tableflow_core.engine.row_delta import RowDelta
from tableflow_core.errors import MainMovedError
from tableflow_core.state.table_state import TableState

BRANCH_PREFIX = "tableflow_run_"
MAIN = "main"


def stale_branches(state: TableState) -> list[str]:
    """Run branches that can never be fast-forwarded or were already merged.

    A branch of a run still in flight is at main's head or a descendant of it; those
    are kept. Branches left behind by crashed runs end up behind or beside main.
    """
    main = state.current_snapshot_id
    main_ancestry = set(state.ancestors_of(main))
    stale = []
    for name, head in state.refs.items():
        if not name.startswith(BRANCH_PREFIX) or head == main:
            continue
        merged = head in main_ancestry
        descends_from_main = main is None or main in state.ancestors_of(head)
        if merged or not descends_from_main:
            stale.append(name)
    return stale


def _manage(transaction: Any) -> Any:
    from pyiceberg.table.update.snapshot import ManageSnapshots

    return ManageSnapshots(transaction)


def start_run(table: Any, branch: str, stale: Sequence[str]) -> int:
    """One commit: `branch` at main's head (a table without snapshots first gets `main` at
    a new empty snapshot), the `stale` run branches removed. Returns the branch's base.

    Raises MainMovedError when the commit did not create the branch where it was asked
    (another run gave the table its first snapshot in between): the caller starts over.
    """
    return begin_run(table, branch, stale)[0]


def begin_run(table: Any, branch: str, stale: Sequence[str]) -> tuple[int, Any]:
    """`start_run`, also returning the table as that commit left it (the next commit of a
    run that writes no snapshot in between, `publish_run`, needs no new load)."""
    transaction = transaction_of(table)
    main = table.metadata.refs.get(MAIN)
    if main is None:
        # Staged first: its requirement (main does not exist yet) is the transaction's.
        with transaction.update_snapshot(branch=MAIN).fast_append() as first:
            pass
        base = int(first.snapshot_id)
    else:
        base = int(main.snapshot_id)
    with _manage(transaction) as refs:
        refs.create_branch(base, branch)
        for name in stale:
            refs.remove_branch(name)
    try:
        updated = transaction.commit_transaction()
    except Exception as exc:
        from pyiceberg.exceptions import CommitFailedException

        if isinstance(exc, CommitFailedException):
            raise MainMovedError(f"the run's branch could not be created: {exc}") from exc
        raise
    made = updated.metadata.refs.get(branch)
    if made is None or made.snapshot_id != base:
        raise MainMovedError("the run's branch could not be created: main changed meanwhile")
    return base, updated


def rows_at(table: Any, snapshot_id: int) -> int | None:
    """Rows in `table` (pyiceberg, as loaded before `start_run`) at `snapshot_id`, from its
    summary's total-records; 0 for the empty first snapshot `start_run` gave a new table
    (not in that metadata yet); None when the summary does not say."""
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:
        return 0
    total = (snapshot.summary or {}).get("total-records")
    try:
        return int(total) if total is not None else None
    except ValueError:
        return None


def publish_run(
    table: Any,
    base_snapshot_id: int,
    branch: str,
    properties: Mapping[str, str],
    other_branches: Iterable[str] = (),
    *,
    before_commit: Any = None,
    data_files: Sequence[Any] = (),
    delete_files: Sequence[Any] = (),
    new_branch: bool = False,
    stale: Sequence[str] = (),
) -> int:
    """One commit: the accounting snapshot (`properties`) on `branch`, `main` moved to it,
    `branch` and `other_branches` removed. Returns main's new snapshot id.

    `data_files` (pyiceberg DataFiles the run's read tasks wrote, a shared job's) are
    added by that snapshot: the run's data, its offsets and accounting in one snapshot.
    `delete_files` (position delete files of an upsert run merged on the driver,
    pipeline/upsert_rows.py) are added by the same snapshot (`engine/row_delta.RowDelta`):
    they were computed against `base_snapshot_id`, which main must still be at.

    `new_branch`: the run wrote nothing to a branch of its own (its data files are
    `data_files`), so `branch` is cut at `base_snapshot_id` by this same commit, and the
    `stale` run branches are removed by it too: the run costs one commit, not two
    (`begin_run` + this one). pyiceberg's retry of a refused commit drops every ref
    change but the removals, so a retry still never moves `main` (checked after the
    commit, as always); what it may leave, the run's branch on a snapshot outside main's
    history, the caller drops, or the next run removes as stale.

    `table`: loaded after the write. Refused (MainMovedError) unless `main` is still at
    `base_snapshot_id`: checked here against `table`, and by the catalog at commit
    (assert-ref-snapshot-id on main) for the window in between. `before_commit` runs
    right before the commit (the test crash point).
    """
    from pyiceberg.exceptions import CommitFailedException

    refs = table.metadata.refs
    main, head = refs.get(MAIN), refs.get(branch)
    if main is None or main.snapshot_id != base_snapshot_id:
        found = main.snapshot_id if main is not None else None
        raise MainMovedError(f"main is at {found}, the run branched from {base_snapshot_id}")
    if head is None and not new_branch:  # a later run dropped it: main moved past this run
        raise MainMovedError(f"the run's branch {branch} is gone")
    retention = {
        "max_ref_age_ms": main.max_ref_age_ms,
        "max_snapshot_age_ms": main.max_snapshot_age_ms,
        "min_snapshots_to_keep": main.min_snapshots_to_keep,
    }
    transaction = transaction_of(table)
    # main where it is: no change, but its assert-ref-snapshot-id(main, base) is the one
    # requirement of this kind the transaction keeps (see the module docstring).
    with _manage(transaction) as keep:
        keep.create_branch(base_snapshot_id, MAIN, **retention)
        if new_branch:
            keep.create_branch(base_snapshot_id, branch)
    # A merge append: with `commit.manifest-merge.enabled` (tableflow's tables have it,
    # ingest/upkeep.py) the new manifest and the small ones before it
    # are merged once `commit.manifest.min-count-to-merge` of them pile up, as Iceberg's
    # Java appends do; without it, it is a fast append (a manifest per commit, for ever).
    producer = (
        RowDelta(transaction, table.io, delete_files, dict(properties), branch)
        if delete_files
        else transaction.update_snapshot(
            snapshot_properties=dict(properties), branch=branch
        ).merge_append()
    )
    with producer as accounting:
        for data_file in data_files:
            accounting.append_data_file(data_file)
    published = int(accounting.snapshot_id)
    with _manage(transaction) as moves:
        moves.create_branch(published, MAIN, **retention)
        others = dict.fromkeys(n for n in (*other_branches, *stale) if n in refs and n != branch)
        for name in (branch, *others):
            moves.remove_branch(name)
    if before_commit is not None:
        before_commit()
    try:
        updated = transaction.commit_transaction()
    except CommitFailedException as exc:
        raise MainMovedError(f"the catalog refused to move main: {exc}") from exc
    now = updated.metadata.refs.get(MAIN)
    if now is None or now.snapshot_id != published:
        raise MainMovedError("the catalog refused to move main")
    return published


def snapshots_since(table: Any, since: int, to: int) -> list[Any] | None:
    """The snapshots after `since` up to `to` on `to`'s lineage, oldest first; None when
    `since` is not an ancestor of `to`."""
    found = []
    snapshot = table.metadata.snapshot_by_id(to)
    while snapshot is not None and snapshot.snapshot_id != since:
        found.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = table.metadata.snapshot_by_id(parent) if parent is not None else None
    return None if snapshot is None else found[::-1]


def rebase_point(table: Any, base_snapshot_id: int) -> int | None:
    """Where main is in `table` (pyiceberg, loaded after a refused publish), when it moved
    from `base_snapshot_id` by `replace` snapshots only (a compaction, a rewrite of
    manifests or of delete files: the same rows, the same committed offsets); None
    otherwise. An append's data files are as right on top of it as on the base, so its
    publish may go on from there instead of running again."""
    main = table.metadata.refs.get(MAIN)
    if main is None or main.snapshot_id == base_snapshot_id:
        return None
    between = snapshots_since(table, base_snapshot_id, main.snapshot_id)
    if not between or not all(_replaces(s) for s in between):
        return None
    return int(main.snapshot_id)


def _replaces(snapshot: Any) -> bool:
    summary = snapshot.summary
    return summary is not None and summary.operation.value == "replace"


def committed_at_ms(table: Any, snapshot_id: int) -> int | None:
    """When `snapshot_id` was committed (Unix ms), from `table` as its own commit left it
    (pyiceberg updates a table's metadata in place when its transaction commits)."""
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    return snapshot.timestamp_ms if snapshot is not None else None


def drop_branches(catalog: Any, identifier: tuple[str, ...], names: Iterable[str]) -> None:
    """Best effort, one commit: remove the named branches (a run that did not publish)."""
    with contextlib.suppress(Exception):
        table = catalog.load_table(identifier)
        present = [name for name in names if name in table.metadata.refs]
        if present:
            with table.manage_snapshots() as refs:
                for name in present:
                    refs.remove_branch(name)
