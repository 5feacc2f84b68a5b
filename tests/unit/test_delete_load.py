"""Pure tests: an upsert table's maintenance due by its delete files
(maintenance/delete_load.py): their merge when they pile up, a compaction when they
delete a share of the rows."""

from __future__ import annotations

from tableflow_core.config.models.maintenance import (
    CompactSettings,
    Maintenance,
    RewriteDeletesSettings,
)
from tableflow_core.maintenance import maintenance_due
from tableflow_core.maintenance.activity import TableActivity
from tableflow_core.maintenance.delete_load import (
    DELETE_FILES_PER_DATA_FILE,
    DELETED_ROWS_SHARE,
    MERGE_MIN_DELETE_FILES,
    DeletesCompaction,
    delete_file_triggers,
    deleted_rows_triggers,
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
    assert delete_file_triggers(activity(3, files - 1)) == ()
    (why,) = delete_file_triggers(activity(3, files))
    assert f"{files} delete files on 3 data files" in why
    deleted = int(DELETED_ROWS_SHARE * 1000)
    assert deleted_rows_triggers(activity(3, 1, deleted - 1)) == ()
    (why,) = deleted_rows_triggers(activity(3, 1, deleted))
    assert f"{DELETED_ROWS_SHARE:.0%} of the rows deleted" in why
    for triggers in (delete_file_triggers, deleted_rows_triggers):
        assert triggers(activity(0, 0)) == triggers(None) == ()


def test_piled_up_delete_files_are_merged_not_the_table_rewritten() -> None:
    """A table of 20 data files after 4 batches that each touched every file: its delete
    files are merged (reading the deletes only); rewriting its data files for them would
    cost the whole table every 4 batches."""
    piled = activity(20, DELETE_FILES_PER_DATA_FILE * 20, deleted=50, records=100_000_000)
    assert maintenance_due(table_with(None), {}, NOW, activity=piled) == []  # append
    upsert = table_with(None, mode="upsert")
    assert maintenance_due(upsert, {}, NOW, activity=activity(20, 1)) == []
    (due,) = maintenance_due(upsert, {}, NOW, activity=piled)
    assert due.operation == "rewrite_deletes" and due.for_deletes
    assert due.arguments == RewriteDeletesSettings(min_delete_files=MERGE_MIN_DELETE_FILES)
    assert "80 delete files on 20 data files" in due.describe(NOW)


def test_a_share_of_rows_deleted_compacts_the_table_and_no_merge_runs_before() -> None:
    upsert = table_with(None, mode="upsert")
    both = activity(2, DELETE_FILES_PER_DATA_FILE * 2, deleted=int(DELETED_ROWS_SHARE * 1000))
    (due,) = maintenance_due(upsert, {}, NOW, activity=both)
    assert due.operation == "compact" and due.for_deletes
    assert due.arguments == DeletesCompaction(CompactSettings())
    assert "of the rows deleted" in due.describe(NOW)
    assert (
        maintenance_due(upsert, {}, NOW, activity=both, only=frozenset({"expire_snapshots"})) == []
    )


def test_a_block_s_settings_serve_the_operations_due_for_delete_files() -> None:
    block = Maintenance.model_validate(
        {
            "every": "1h",
            "compact": {"min_input_files": 7},
            "rewrite_deletes": {"min_delete_files": 3},
            "expire_snapshots": True,
        }
    )
    upsert = table_with(block, mode="upsert")
    last = last_run_properties(["compact", "rewrite_deletes"], NOW)
    # One data file (under the compaction's floor), the intervals not passed: the delete
    # files make the operations due all the same, with the block's settings.
    deleting = TableActivity(
        data_files=1, delete_files=1, deleted_rows=500, records=1000, snapshot_times=(NOW,)
    )
    (compact,) = [d for d in maintenance_due(upsert, last, NOW, activity=deleting)]
    assert compact.operation == "compact" and compact.for_deletes
    assert compact.arguments.settings.min_input_files == 7
    piled = TableActivity(
        data_files=1, delete_files=DELETE_FILES_PER_DATA_FILE, records=1000, snapshot_times=(NOW,)
    )
    (merge,) = maintenance_due(upsert, last, NOW, activity=piled)
    assert merge.operation == "rewrite_deletes" and merge.for_deletes
    assert merge.arguments.min_delete_files == 3
    assert maintenance_due(upsert, last, NOW, activity=activity(1, 0)) == []


def test_operations_due_for_delete_files_keep_the_run_order() -> None:
    """A block's compaction due by its own triggers runs before the merge of delete files."""
    block = Maintenance.model_validate({"every": "1h", "compact": {"every_commits": 1}})
    upsert = table_with(block, mode="upsert")
    piled = TableActivity(
        data_files=6, delete_files=DELETE_FILES_PER_DATA_FILE * 6, records=1000,
        snapshot_times=(NOW,),
    )  # fmt: skip
    due = maintenance_due(upsert, {}, NOW, activity=piled)
    assert [d.operation for d in due] == ["compact", "rewrite_deletes"]
