"""`publish_run(new_branch=True)`: the run's branch cut, the files added, main moved and
the branches removed in one commit; a second run published from the same main is refused
and never moves main, even through pyiceberg's retry (pyiceberg SqlCatalog on SQLite)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tableflow_core.engine.run_branch import publish_run, stale_branches
from tableflow_core.errors import MainMovedError
from tableflow_core.state.table_state import table_state_of


def test_one_commit_publishes_and_a_second_run_from_the_same_main_is_refused(
    tmp_path: Path,
) -> None:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("n")
    table = catalog.create_table("n.t", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1]}))
    base = table.metadata.current_snapshot_id
    assert base is not None
    with table.manage_snapshots() as refs:
        refs.create_branch(base, "tableflow_run_crashed")
    first, second = catalog.load_table("n.t"), catalog.load_table("n.t")
    commits = len(first.metadata.metadata_log)

    published = publish_run(
        first, base, "tableflow_run_a", {"tableflow.offsets": "a"},
        new_branch=True, stale=["tableflow_run_crashed"],
    )  # fmt: skip
    after = catalog.load_table("n.t").metadata
    assert len(after.metadata_log) == commits + 1
    assert after.refs["main"].snapshot_id == published
    assert set(after.refs) == {"main"}
    head = after.snapshot_by_id(published)
    assert head is not None and head.parent_snapshot_id == base

    with pytest.raises(MainMovedError):
        publish_run(second, base, "tableflow_run_b", {"tableflow.offsets": "b"}, new_branch=True)
    now = catalog.load_table("n.t").metadata
    assert now.refs["main"].snapshot_id == published  # the retry did not move main
    # What pyiceberg's retry may leave (a branch on a snapshot outside main's history)
    # is a stale branch for the next run to remove.
    assert set(now.refs) - {"main"} <= set(stale_branches(table_state_of(now)))
