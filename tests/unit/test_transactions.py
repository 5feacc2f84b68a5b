"""The staged metadata of `catalog/transactions.py`: pyiceberg's, computed once per state."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyiceberg.table.update import update_table_metadata
from pyiceberg.table.update.snapshot import ManageSnapshots

from tableflow_core.catalog.transactions import (
    StagedTransaction,
    stage_table,
    staged_metadata,
    transaction,
)
from tableflow_core.engine import run_branch


def _table(catalog: Any, commits: int) -> Any:
    table = catalog.create_table(("ns", "t"), schema=pa.schema([("id", pa.int64())]))
    for n in range(commits):
        table.append(pa.table({"id": [n]}))
    return table


def _staged_changes(staged: Any, table: Any) -> None:
    base = table.metadata.current_snapshot_id
    with ManageSnapshots(staged) as refs:
        refs.create_branch(base, "b1")
        refs.create_tag(base, "t1")
    staged.set_properties({"k": "v"})
    staged.remove_properties("k")
    with staged.update_snapshot(branch="b1").fast_append():
        pass


def test_the_staged_metadata_is_pyicebergs_without_the_copy(catalog: Any) -> None:
    table = _table(catalog, 3)
    staged = transaction(table)
    _staged_changes(staged, table)
    expected = update_table_metadata(table.metadata, staged._updates)
    got = staged_metadata(table.metadata, staged._updates)
    ignore = {"last_updated_ms"}
    assert got.model_dump(exclude=ignore) == expected.model_dump(exclude=ignore)
    assert len(got.snapshots) == 4 and set(got.refs) == {"main", "b1", "t1"}


def test_it_is_computed_once_per_staged_state(catalog: Any) -> None:
    table = _table(catalog, 2)
    staged = transaction(table)
    assert isinstance(staged, StagedTransaction)
    first = staged.table_metadata
    assert staged.table_metadata is first
    staged.set_properties({"k": "v"})
    second = staged.table_metadata
    assert second is not first and second.properties["k"] == "v"
    assert staged.table_metadata is second


def test_a_run_published_through_it_moves_main(catalog: Any) -> None:
    table = _table(catalog, 2)
    base, branched = run_branch.begin_run(table, "tableflow_run_x", [])
    published = run_branch.publish_run(branched, base, "tableflow_run_x", {"tableflow.k": "1"})
    reloaded = catalog.load_table(("ns", "t"))
    assert reloaded.metadata.current_snapshot_id == published
    assert "tableflow_run_x" not in reloaded.metadata.refs
    snapshot = reloaded.metadata.snapshot_by_id(published)
    assert snapshot is not None and snapshot.parent_snapshot_id == base
    assert snapshot.summary is not None and snapshot.summary["tableflow.k"] == "1"


def test_a_catalogs_staged_commit_is_pyicebergs(catalog: Any) -> None:
    table = _table(catalog, 3)
    staged = transaction(table)
    _staged_changes(staged, table)
    current = catalog.load_table(("ns", "t"))
    args = (current, ("ns", "t"), staged._requirements, staged._updates)
    expected = catalog._update_and_stage_table(*args)
    got = stage_table(catalog, *args)
    ignore = {"last_updated_ms"}
    assert got.metadata.model_dump(exclude=ignore) == expected.metadata.model_dump(exclude=ignore)
    assert got.metadata_location.split("/")[-1][:5] == expected.metadata_location.split("/")[-1][:5]
    assert got.metadata.metadata_log[-1].metadata_file == current.metadata_location
