"""Pure tests: an upsert table's compaction due by its delete files (maintenance/delete_load.py)."""

from __future__ import annotations

from tableflow_core.config.models.maintenance import CompactSettings, Maintenance
from tableflow_core.maintenance import maintenance_due
from tableflow_core.maintenance.activity import TableActivity
from tableflow_core.maintenance.delete_load import (
    DELETE_FILES_PER_DATA_FILE,
    DELETED_ROWS_SHARE,
    DeletesCompaction,
    delete_load_triggers,
)
from tableflow_core.maintenance.last_run import last_run_properties
from tests.unit.test_maintenance_schedule import NOW, table_with


def activity(
    data_files: int, delete_files: int, deleted: int = 0, records: int = 1000
) -> TableActivity:
    return TableActivity(
        data_files=data_files, delete_files=delete_files, deleted_rows=deleted, records=records
    )


def test_delete_files_per_data_file_or_deleted_rows_make_it_due() -> None:
    files = DELETE_FILES_PER_DATA_FILE * 3
    assert delete_load_triggers(activity(3, files - 1)) == ()
    (why,) = delete_load_triggers(activity(3, files))
    assert f"{files} delete files on 3 data files" in why
    deleted = int(DELETED_ROWS_SHARE * 1000)
    assert delete_load_triggers(activity(3, 1, deleted - 1)) == ()
    (why,) = delete_load_triggers(activity(3, 1, deleted))
    assert f"{DELETED_ROWS_SHARE:.0%} of the rows deleted" in why
    assert delete_load_triggers(activity(0, 0)) == delete_load_triggers(None) == ()


def test_an_upsert_table_without_a_block_is_compacted_for_its_delete_files() -> None:
    heavy = activity(2, DELETE_FILES_PER_DATA_FILE * 2)
    assert maintenance_due(table_with(None), {}, NOW, activity=heavy) == []  # append
    upsert = table_with(None, mode="upsert")
    assert maintenance_due(upsert, {}, NOW, activity=activity(2, 1)) == []
    (due,) = maintenance_due(upsert, {}, NOW, activity=heavy)
    assert due.operation == "compact" and due.for_deletes
    assert due.arguments == DeletesCompaction(CompactSettings())
    assert "delete files on 2 data files" in due.describe(NOW)
    assert (
        maintenance_due(upsert, {}, NOW, activity=heavy, only=frozenset({"expire_snapshots"})) == []
    )


def test_a_block_s_compaction_is_due_for_delete_files_with_its_settings() -> None:
    block = Maintenance.model_validate(
        {"every": "1h", "compact": {"min_input_files": 7}, "expire_snapshots": True}
    )
    upsert = table_with(block, mode="upsert")
    last = last_run_properties(["compact"], NOW)
    # One data file (under the compaction's floor), its interval not passed: its delete
    # files make it due all the same, with the block's settings.
    heavy = TableActivity(
        data_files=1, delete_files=DELETE_FILES_PER_DATA_FILE, records=1000, snapshot_times=(NOW,)
    )
    due = maintenance_due(upsert, last, NOW, activity=heavy)
    (compact,) = [d for d in due if d.operation == "compact"]
    assert compact.for_deletes and compact.arguments.settings.min_input_files == 7
    assert maintenance_due(upsert, last, NOW, activity=activity(1, 0)) == []
