"""The run's branch commits (engine/run_branch.py) against the real REST catalog server.

pyiceberg only (no Spark): the data snapshot a run's write stage would make is a
pyiceberg append on the branch here. Every figure is read back from the table's
metadata log (one entry per catalog commit) and its refs.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from tableflow_core.engine.run_branch import publish_run, rows_at, stale_branches, start_run
from tableflow_core.errors import MainMovedError
from tableflow_core.state.table_state import table_state_of
from tests.fixtures.catalog import CatalogServer, new_table

pytestmark = pytest.mark.slow  # needs the catalog server

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=True)])
BRANCH = "tableflow_run_test"


def catalog_and_table(server: CatalogServer) -> tuple[Any, Any]:
    catalog = server.pyiceberg_catalog()
    return catalog, new_table(catalog, "t", SCHEMA, "rb")


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": list(range(start, start + n))}, schema=SCHEMA)


def run_with_rows_on_its_branch(server: CatalogServer) -> tuple[Any, Any, int]:
    """A run started on 3 rows of main (ids 0..2) that wrote 4 rows (100..103) to its branch."""
    catalog, table = catalog_and_table(server)
    table.append(rows(3))
    base = start_run(table, BRANCH, [])
    table.append(rows(4, 100), branch=BRANCH)
    return catalog, table, base


def commits(table: Any) -> int:
    """Catalog commits since the table was created (one metadata file each)."""
    table.refresh()
    return len(table.metadata.metadata_log)


def test_a_new_table_run_is_two_commits_of_its_own(catalog_server: CatalogServer) -> None:
    _, table = catalog_and_table(catalog_server)
    created = commits(table)
    base = start_run(table, BRANCH, [])  # first snapshot + branch: one commit
    assert commits(table) == created + 1
    assert (
        table.metadata.refs["main"].snapshot_id == base == table.metadata.refs[BRANCH].snapshot_id
    )
    table.append(rows(5), branch=BRANCH)  # the write stage's commit (Spark in a real run)
    before_publish = commits(table)
    published = publish_run(table, base, BRANCH, {"tableflow.offsets": '{"x": 1}'})
    assert commits(table) == before_publish + 1  # accounting + main's move + branch drop
    refs = table.metadata.refs
    assert set(refs) == {"main"} and refs["main"].snapshot_id == published
    head = table.metadata.snapshot_by_id(published)
    assert head is not None and head.summary["tableflow.offsets"] == '{"x": 1}'
    assert table.scan().to_arrow().num_rows == 5
    # main's log shows the published snapshot only after its base: never the data alone
    assert [e.snapshot_id for e in table.metadata.snapshot_log] == [base, published]


def test_start_drops_stale_branches_in_the_same_commit(catalog_server: CatalogServer) -> None:
    _, table = catalog_and_table(catalog_server)
    table.append(rows(1))
    old = table.metadata.current_snapshot_id
    table.manage_snapshots().create_branch(old, "tableflow_run_crashed").commit()
    table.append(rows(1, 1))  # main moves past it: merged, stale
    stale = stale_branches(table_state_of(table.metadata))
    assert stale == ["tableflow_run_crashed"]
    before = commits(table)
    start_run(table, BRANCH, stale)
    assert commits(table) == before + 1
    assert set(table.metadata.refs) == {"main", BRANCH}


def test_main_moved_after_the_check_is_refused_by_the_catalog(
    catalog_server: CatalogServer,
) -> None:
    catalog, table, base = run_with_rows_on_its_branch(catalog_server)
    table.refresh()  # what publish loads after the write
    other = catalog.load_table(table.name())

    def another_commit_lands() -> None:  # between publish's own check and its commit
        other.append(rows(1, 1000))

    with pytest.raises(MainMovedError, match="refused"):
        publish_run(
            table, base, BRANCH, {"tableflow.offsets": "run"}, before_commit=another_commit_lands
        )
    now = catalog.load_table(table.name())
    ids = sorted(now.scan().to_arrow()["id"].to_pylist())
    assert ids == [0, 1, 2, 1000]  # the other commit only, none of the run's rows
    # pyiceberg retries a conflicting transaction, rebuilding only the snapshot on its
    # target branch (the run's): nothing of main's history carries the run's properties
    ancestry = table_state_of(now.metadata).ancestors_of(now.metadata.current_snapshot_id)
    summaries = [now.metadata.snapshot_by_id(s).summary for s in ancestry]  # type: ignore[union-attr]
    assert [s.get("tableflow.offsets") for s in summaries] == [None] * len(ancestry)


def test_main_moved_before_the_publish_is_refused_before_committing(
    catalog_server: CatalogServer,
) -> None:
    catalog, table, base = run_with_rows_on_its_branch(catalog_server)
    catalog.load_table(table.name()).append(rows(1, 1000))
    table.refresh()
    before = commits(table)
    with pytest.raises(MainMovedError, match="branched from"):
        publish_run(table, base, BRANCH, {"tableflow.offsets": "run"})
    assert commits(table) == before


def test_two_runs_giving_a_new_table_its_first_snapshot(catalog_server: CatalogServer) -> None:
    """The second run's commit is refused (main exists now); pyiceberg's retry may put its
    empty snapshot on top of the first run's, but never creates the branch: the run is
    told to start over, and main carries no offsets either way."""
    catalog, table = catalog_and_table(catalog_server)
    late = catalog.load_table(table.name())  # loaded before the first run's commit
    first = start_run(table, BRANCH, [])
    with pytest.raises(MainMovedError):
        start_run(late, "tableflow_run_late", [])
    now = catalog.load_table(table.name())
    assert set(now.metadata.refs) == {"main", BRANCH}
    ancestry = table_state_of(now.metadata).ancestors_of(now.metadata.current_snapshot_id)
    assert ancestry[-1] == first
    assert all(now.scan(snapshot_id=s).to_arrow().num_rows == 0 for s in ancestry)


def test_rows_at_the_base_of_a_run(catalog_server: CatalogServer) -> None:
    """The transform stage plans no insert-if-absent join against an empty table."""
    catalog, table = catalog_and_table(catalog_server)
    loaded = catalog.load_table(table.name())  # as the engine loads it, before start_run
    base = start_run(table, BRANCH, [])
    assert rows_at(loaded, base) == 0  # the new table's empty first snapshot
    table.append(rows(5), branch=BRANCH)
    published = publish_run(table, base, BRANCH, {"tableflow.offsets": '{"x": 1}'})
    table.refresh()
    # The published accounting snapshot carries the branch's totals forward.
    assert rows_at(table, published) == 5
    second = start_run(table, BRANCH, [])
    assert rows_at(table, second) == 5
