"""An append's publish refused because maintenance compacted the table meanwhile goes on
top of the compaction (engine/run_branch.rebase_point, pipeline/shared_run)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles

from tableflow_core.engine import run_branch
from tableflow_core.errors import MainMovedError
from tableflow_core.pipeline import shared_run

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())}, schema=SCHEMA)


def _files(table: Any, ids: list[int]) -> list[Any]:
    return list(_dataframe_to_data_files(table_metadata=table.metadata, df=_rows(ids), io=table.io))


class _Rewrite(_OverwriteFiles):
    """pyiceberg's overwrite committed as `replace` (its summaries refuse the operation)."""

    def _summary(self, snapshot_properties: dict[str, str] | None = None) -> Summary:
        summary = super()._summary(snapshot_properties or {})
        return Summary(Operation.REPLACE, **summary.additional_properties)


def _compact(catalog: Any) -> int:
    """What Spark's rewrite_data_files commits: the data files replaced by one file of the
    same rows, operation `replace`."""
    table = catalog.load_table(("ns", "t"))
    old = list(table.scan().plan_files())
    ids = sorted(table.scan().to_arrow().column("id").to_pylist())
    transaction = table.transaction()
    with _Rewrite(Operation.OVERWRITE, transaction, table.io) as rewrite:
        for task in old:
            rewrite.delete_data_file(task.file)
        for data_file in _files(table, ids):
            rewrite.append_data_file(data_file)
    return int(transaction.commit_transaction().metadata.current_snapshot_id)


@pytest.fixture
def table(catalog: Any) -> Any:
    made = catalog.create_table(("ns", "t"), schema=SCHEMA)
    made.append(_rows([1, 2]))
    made.append(_rows([3]))
    return catalog.load_table(("ns", "t"))


def test_main_moved_by_a_compaction_is_a_rebase_point(catalog: Any, table: Any) -> None:
    base = table.metadata.current_snapshot_id
    compacted = _compact(catalog)
    assert run_branch.rebase_point(catalog.load_table(("ns", "t")), base) == compacted


def test_main_moved_by_an_append_is_not(catalog: Any, table: Any) -> None:
    base = table.metadata.current_snapshot_id
    _compact(catalog)
    catalog.load_table(("ns", "t")).append(_rows([9]))
    assert run_branch.rebase_point(catalog.load_table(("ns", "t")), base) is None
    assert run_branch.rebase_point(catalog.load_table(("ns", "t")), 12345) is None


def _started(catalog: Any, table: Any) -> Any:
    spec = SimpleNamespace(namespace=("ns",), table="t")
    return shared_run._Started(
        member=SimpleNamespace(spec=spec),  # type: ignore[arg-type]
        table=table,
        run_id="r1",
        branch="tableflow_run_r1",
        base=int(table.metadata.current_snapshot_id),
        before={0: 3},
        after={0: 5},
        other_branches=(),
        began=0.0,
        new_branch=True,
    )


def test_an_append_refused_by_a_compaction_is_published_on_top(catalog: Any, table: Any) -> None:
    run = _started(catalog, table)
    data_files = _files(table, [4, 5])
    compacted = _compact(catalog)  # while the run wrote its files
    handle = SimpleNamespace(catalog=catalog)
    published = shared_run._publish_commit(run, {"tableflow.k": "v"}, data_files, (), handle)
    after = catalog.load_table(("ns", "t"))
    assert after.metadata.current_snapshot_id == published
    snapshot = after.metadata.snapshot_by_id(published)
    assert snapshot is not None and snapshot.parent_snapshot_id == compacted
    assert sorted(after.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3, 4, 5]
    assert "publish_rebased" in run.timings and run.base == compacted


def test_an_append_refused_by_another_append_is_refused(catalog: Any, table: Any) -> None:
    run = _started(catalog, table)
    data_files = _files(table, [4, 5])
    catalog.load_table(("ns", "t")).append(_rows([4, 5]))  # another run committed
    handle = SimpleNamespace(catalog=catalog)
    with pytest.raises(MainMovedError):
        shared_run._publish_commit(run, {"tableflow.k": "v"}, data_files, (), handle)
    assert sorted(catalog.load_table(("ns", "t")).scan().to_arrow()["id"].to_pylist()) == [
        1,
        2,
        3,
        4,
        5,
    ]


def test_deletes_are_never_rebased(catalog: Any, table: Any) -> None:
    run = _started(catalog, table)
    _compact(catalog)
    run.table = catalog.load_table(("ns", "t"))  # main moved: refused before any write
    handle = SimpleNamespace(catalog=catalog)
    with pytest.raises(MainMovedError):
        shared_run._publish_commit(run, {}, [], [object()], handle)
    assert "publish_rebased" not in run.timings
