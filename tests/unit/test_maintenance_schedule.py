"""Pure tests: the maintenance block, merging with defaults, what is due."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from tableflow_core.config.models.formats import Format
from tableflow_core.config.models.maintenance import Maintenance
from tableflow_core.config.project import SourceLocation, Table
from tableflow_core.maintenance import maintenance_due
from tableflow_core.maintenance.last_run import last_run_properties, last_runs

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def table_with(maintenance: Maintenance | None, mode: str = "append") -> Table:
    return Table(
        name="orders",
        topic="orders",
        namespace=("shop",),
        table="orders",
        value=Format(format="json"),
        key=Format(format="string"),
        mode=mode,  # type: ignore[arg-type]
        key_columns=("id",) if mode == "upsert" else (),
        partition_by=(),
        sort_by=(),
        properties={},
        metadata_columns=(),
        start_from="earliest",
        max_records_per_run=None,
        transforms=(),
        checks=(),
        on_error="fail",
        dlq=None,
        refresh_interval_s=300,
        publish_to=(),
        tags=(),
        description=None,
        source=SourceLocation(Path("tables/orders.yml"), 1),
        maintenance=maintenance,
    )


ISSUE_BLOCK = {
    "every": "1h",
    "compact": {"target_file_size": "128MB", "min_input_files": 5},
    "expire_snapshots": {"older_than": "7d", "retain_last": 3},
    "remove_orphans": {"older_than": "3d"},
    "rewrite_deletes": {"min_delete_files": 10},
    "rewrite_manifests": True,
}


def test_the_issue_block_parses() -> None:
    block = Maintenance.model_validate(ISSUE_BLOCK)
    assert block.compact is not None and block.compact.target_file_size_bytes == 128 * 1024**2
    assert block.rewrite_manifests is not None
    assert block.expire_snapshots is not None and block.expire_snapshots.retain_last == 3


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"every": "often"}, "invalid duration"),
        ({"compact": {"target_file_size": "big"}}, "invalid size"),
        ({"remove_orphans": {"older_than": "2h"}}, "below the 1d floor"),
        ({"compact": {"min_input_file": 3}}, "min_input_file"),
        ({"vacuum": True}, "vacuum"),
    ],
)
def test_bad_blocks_are_refused(block: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Maintenance.model_validate(block)


def test_table_keys_override_defaults_key_by_key() -> None:
    defaults = Maintenance.model_validate(
        {"every": "2h", "compact": True, "rewrite_manifests": True}
    )
    own = Maintenance.model_validate(
        {"compact": {"min_input_files": 9}, "rewrite_manifests": False}
    )
    merged = own.merged_over(defaults)
    assert merged.every == "2h"
    assert merged.compact is not None and merged.compact.min_input_files == 9
    assert merged.rewrite_manifests is None


def test_never_run_operations_are_due_in_run_order() -> None:
    due = maintenance_due(table_with(Maintenance.model_validate(ISSUE_BLOCK)), {}, NOW)
    # rewrite_deletes only applies to upsert tables
    assert [d.operation for d in due] == [
        "compact",
        "rewrite_manifests",
        "expire_snapshots",
        "remove_orphans",
    ]
    assert due[0].describe(NOW) == (
        "compact on orders (every 1h, 10 commits or 20 small files; never run)"
    )
    upsert = table_with(Maintenance.model_validate(ISSUE_BLOCK), mode="upsert")
    assert "rewrite_deletes" in [d.operation for d in maintenance_due(upsert, {}, NOW)]


def test_last_runs_decide_what_is_due() -> None:
    block = Maintenance.model_validate(
        {"every": "1h", "compact": True, "expire_snapshots": {"every": "1d"}}
    )
    properties = last_run_properties(["compact", "expire_snapshots"], NOW - timedelta(hours=2))
    assert set(last_runs(properties)) == {"compact", "expire_snapshots"}
    due = maintenance_due(table_with(block), properties, NOW)
    assert [d.operation for d in due] == ["compact"]
    assert "last run 2026-11-22T10:00:00+00:00, 2h ago" in due[0].describe(NOW)
    forced = maintenance_due(table_with(block), properties, NOW, force=True)
    assert [(d.operation, d.forced) for d in forced] == [
        ("compact", False),
        ("expire_snapshots", True),
    ]
    assert "forced" in forced[1].describe()
    only = maintenance_due(
        table_with(block), properties, NOW, force=True, only=frozenset({"compact"})
    )
    assert [d.operation for d in only] == ["compact"]


def test_nothing_is_due_without_a_block_or_a_table() -> None:
    assert maintenance_due(table_with(None), {}, NOW) == []
    block = Maintenance.model_validate(ISSUE_BLOCK)
    assert maintenance_due(table_with(block), None, NOW) == []


def test_an_unreadable_last_run_counts_as_never() -> None:
    block = Maintenance.model_validate({"compact": True})
    properties = {"tableflow.maintenance.compact.last-run": "yesterday"}
    assert [d.last_run for d in maintenance_due(table_with(block), properties, NOW)] == [None]


def test_state_objects_with_properties_are_accepted() -> None:
    from tableflow_core.state.table_state import TableState

    state = TableState(1, (), {"main": 1}, last_run_properties(["compact"], NOW))
    block = Maintenance.model_validate({"compact": True})
    assert maintenance_due(table_with(block), state, NOW) == []
    assert replace(state, properties={}).properties == {}


def test_the_project_loader_merges_defaults_and_locates_errors(tmp_path: Path) -> None:
    import yaml

    from tableflow_core.config.errors import ConfigError
    from tableflow_core.config.loader import load_project

    project = {
        "name": "shop",
        "targets": {"dev": {"kafka": {"bootstrap_servers": "127.0.0.1:1"}}},
        "defaults": {"maintenance": {"every": "2h", "compact": True}},
        "tables": [
            {"name": "a", "topic": "a", "value": {"format": "json"}},
            {
                "name": "b",
                "topic": "b",
                "value": {"format": "json"},
                "maintenance": {"compact": False, "rewrite_manifests": True},
            },
        ],
    }
    (tmp_path / "tableflow_project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
    loaded = load_project(tmp_path)
    a, b = loaded.table("a").maintenance, loaded.table("b").maintenance
    assert a is not None and a.compact is not None and a.every == "2h"
    assert b is not None and b.compact is None and b.rewrite_manifests is not None
    assert b.every == "2h"

    project["tables"][1]["maintenance"] = {"remove_orphans": {"older_than": "5m"}}  # type: ignore[index]
    (tmp_path / "tableflow_project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
    with pytest.raises(ConfigError) as error:
        load_project(tmp_path)
    rendered = error.value.render()
    assert "below the 1d floor" in rendered and "tableflow_project.yml:" in rendered


# ------------------------------------------------ compaction by small files or commits
KB, MB = 1024, 1024**2


def commits(count: int, *, files: int = 1, size: int = 10 * KB, start: datetime = NOW):
    """`count` ingest commits, one minute apart, newest first (what table_activity gives)."""
    from tableflow_core.maintenance.activity import FileCommit

    return tuple(
        FileCommit(start - timedelta(minutes=i), files, 0, files * size) for i in range(count)
    )


def activity(data_files: int, recent):  # type: ignore[no-untyped-def]
    from tableflow_core.maintenance.activity import TableActivity

    return TableActivity(data_files=data_files, commits=recent)


COMPACT = Maintenance.model_validate({"every": "1h", "compact": True})


def test_a_one_file_table_is_not_compacted_and_the_dry_run_says_why() -> None:
    """Issue 32: `tableflow run` compacted a one-file table on its first cycle."""
    from tableflow_core.maintenance.schedule import not_due_reason

    one_file = activity(1, commits(1))
    assert maintenance_due(table_with(COMPACT), {}, NOW, activity=one_file) == []
    reason = not_due_reason(table_with(COMPACT), one_file)
    assert reason == "compact not due: 1 data file, fewer than it merges (5)"
    forced = maintenance_due(table_with(COMPACT), {}, NOW, activity=one_file, force=True)
    assert [(d.operation, d.forced) for d in forced] == [("compact", True)]


def test_small_files_make_compaction_due_before_the_hour() -> None:
    """Issue 32: after a compaction, nothing for an hour while small files piled up."""
    ran = last_run_properties(["compact"], NOW - timedelta(minutes=30))
    old = commits(40, start=NOW - timedelta(minutes=31))  # before the last compaction
    few = activity(45, commits(4, files=4) + old)
    assert maintenance_due(table_with(COMPACT), ran, NOW, activity=few) == []
    piled = activity(50, commits(5, files=4) + old)  # 20 small files since it ran
    (due,) = maintenance_due(table_with(COMPACT), ran, NOW, activity=piled)
    assert due.triggers == ("20 small files since the last compaction (due at 20)",)
    assert due.describe(NOW) == (
        "compact on orders (every 1h, 10 commits or 20 small files; "
        "20 small files since the last compaction (due at 20))"
    )


def test_commits_make_compaction_due_and_big_files_are_not_small() -> None:
    ran = last_run_properties(["compact"], NOW - timedelta(minutes=30))
    big = commits(9, size=200 * MB)  # over 75% of the 128MB target: not small
    assert maintenance_due(table_with(COMPACT), ran, NOW, activity=activity(9, big)) == []
    tenth = commits(10, size=200 * MB)
    (due,) = maintenance_due(table_with(COMPACT), ran, NOW, activity=activity(10, tenth))
    assert due.triggers == ("10 commits since the last compaction (due at 10)",)


def test_the_triggers_are_configurable_and_the_interval_still_counts() -> None:
    block = Maintenance.model_validate(
        {"every": "1h", "compact": {"every_commits": None, "every_small_files": 3}}
    )
    ran = last_run_properties(["compact"], NOW - timedelta(minutes=30))
    many = activity(30, commits(25))
    (due,) = maintenance_due(table_with(block), ran, NOW, activity=many)
    assert due.triggers == ("25 small files since the last compaction (due at 3)",)
    assert due.schedule() == "every 1h or 3 small files"
    quiet = activity(6, ())
    long_ago = last_run_properties(["compact"], NOW - timedelta(hours=2))
    (timed,) = maintenance_due(table_with(block), long_ago, NOW, activity=quiet)
    assert timed.triggers == () and "2h ago" in timed.describe(NOW)
    both = maintenance_due(table_with(block), {}, NOW, activity=many)
    assert both[0].triggers == (
        "never run",
        "25 small files since the last compaction (due at 3)",
    )
    with pytest.raises(ValidationError, match="every_small_files"):
        Maintenance.model_validate({"compact": {"every_small_files": 1}})


def test_activity_is_read_from_the_snapshot_summaries(tmp_path: Path) -> None:
    """table_activity on a real pyiceberg table: the commits since the last compaction."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from tableflow_core.maintenance.activity import table_activity

    catalog = SqlCatalog(
        "local", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "wh").as_uri()
    )
    catalog.create_namespace("shop")
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})
    table = catalog.create_table(("shop", "orders"), rows.schema)
    for _ in range(3):
        table.append(rows)
    found = table_activity(table)
    assert found.data_files == 3
    assert [(c.data_files, c.delete_files) for c in found.commits] == [(1, 0)] * 3
    assert all(0 < c.bytes < 10 * KB for c in found.commits)
    times = [c.committed_at for c in found.commits]
    assert times == sorted(times, reverse=True) and all(t.tzinfo for t in times)
    assert found.since(times[1]) == found.commits[:1]


def test_activity_counts_the_rows_of_the_data_files_with_deletes(tmp_path: Path) -> None:
    """On a table with delete files, the rows of the data files a reader applies them to
    (read from its manifests: what a compaction for readers rewrites)."""
    import numpy as np
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from tableflow_core.engine.row_delta import RowDelta
    from tableflow_core.maintenance.activity import table_activity
    from tableflow_core.pipeline.upsert_rows import write_position_deletes

    catalog = SqlCatalog(
        "local", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "wh").as_uri()
    )
    catalog.create_namespace("shop")
    table = catalog.create_table(("shop", "orders"), pa.schema([("id", pa.int64())]))
    for size in (5, 7, 11):
        table.append(pa.table({"id": pa.array(range(size), pa.int64())}))
    assert table_activity(table).rows_with_deletes is None
    seven = next(t.file for t in table.scan().plan_files() if t.file.record_count == 7)
    deletes = write_position_deletes(table.io, table.location(), seven.file_path, np.array([2, 4]))
    with table.transaction() as tx, RowDelta(tx, table.io, [deletes], {}, "main"):
        pass
    found = table_activity(table.refresh())
    assert (found.delete_files, found.deleted_rows, found.records) == (1, 2, 23)
    assert found.rows_with_deletes == 7


def test_the_walk_stops_at_the_last_compaction_not_at_other_rewrites() -> None:
    from types import SimpleNamespace

    from pyiceberg.table.snapshots import Operation, Summary

    from tableflow_core.maintenance.activity import table_activity

    def snapshot(sid: int, parent: int | None, operation: Operation, **summary: str):  # type: ignore[no-untyped-def]
        return SimpleNamespace(
            snapshot_id=sid,
            parent_snapshot_id=parent,
            timestamp_ms=1_800_000_000_000 + sid,
            summary=Summary(operation, **summary),
        )

    files = {"added-data-files": "2", "added-files-size": "100", "total-data-files": "9"}
    snapshots = [
        snapshot(1, None, Operation.APPEND, **files),
        snapshot(2, 1, Operation.REPLACE, **{"deleted-data-files": "4"}),  # a compaction
        snapshot(3, 2, Operation.APPEND, **files),
        snapshot(4, 3, Operation.REPLACE, **{"added-delete-files": "0"}),  # manifests
        snapshot(5, 4, Operation.APPEND, **{"total-data-files": "9"}),  # offsets only
        snapshot(6, 5, Operation.OVERWRITE, **{"added-delete-files": "1", "total-data-files": "7"}),
    ]
    table = SimpleNamespace(metadata=SimpleNamespace(snapshots=snapshots, current_snapshot_id=6))
    found = table_activity(table)
    assert found.data_files == 7
    assert [(c.data_files, c.delete_files) for c in found.commits] == [(0, 1), (2, 0)]
