"""Pure tests: an upsert table's maintenance due by its delete files
(maintenance/delete_load.py): their merge when they pile up, a compaction when they
hold enough of the rows to make readers pay, within the rewrite's budget."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from tableflow_core.config.models.maintenance import (
    UNBOUNDED,
    CompactSettings,
    Maintenance,
    RewriteDeletesSettings,
)
from tableflow_core.config.models.tables import TableConfig
from tableflow_core.maintenance import maintenance_due
from tableflow_core.maintenance.activity import TableActivity
from tableflow_core.maintenance.delete_load import (
    DELETE_FILES_PER_DATA_FILE,
    MERGE_MIN_DELETE_FILES,
    READERS_SHARE,
    REWRITE_PER_DELETED_ROW,
    DeletesCompaction,
    budget_of,
    delete_file_triggers,
    delete_upkeep,
    readers_triggers,
    readers_waiting,
    rewrite_per_deleted_row,
)
from tableflow_core.maintenance.last_run import last_run_properties
from tests.unit.test_maintenance_schedule import NOW, table_with


def activity(
    data_files: int,
    delete_files: int,
    deleted: int = 0,
    records: int = 1000,
    with_deletes: int | None = None,
) -> TableActivity:
    return TableActivity(
        data_files=data_files,
        delete_files=delete_files,
        deleted_rows=deleted,
        records=records,
        rows_with_deletes=with_deletes,
    )


def test_delete_files_per_data_file_make_their_merge_due() -> None:
    files = DELETE_FILES_PER_DATA_FILE * 3
    assert delete_file_triggers(activity(3, files - 1)) == ()
    (why,) = delete_file_triggers(activity(3, files))
    assert f"{files} delete files on 3 data files" in why
    for triggers in (delete_file_triggers, readers_triggers):
        assert triggers(activity(0, 0)) == triggers(None) == ()


def test_applying_deletes_waits_for_a_share_of_rows_with_deletes_and_its_budget() -> None:
    """Due once the data files with deletes hold over READERS_SHARE of the rows (readers
    pay over 1.5x) and rewriting them costs at most REWRITE_PER_DELETED_ROW rows per row
    deleted: a 1M-row table after a 100k batch at once, a 100M-row one after ~2.7M
    deletes (REWRITE_PER_DELETED_ROW: the batches' CPU, each measured per row)."""
    share = int(READERS_SHARE * 1_000_000)
    few = activity(8, 2, deleted=100_000, records=1_000_000, with_deletes=share)
    assert readers_triggers(few) == () and readers_waiting(few) is None
    small = activity(8, 8, deleted=95_000, records=1_000_000, with_deletes=1_000_000)
    (why,) = readers_triggers(small)
    assert "100% of the rows in data files with deletes" in why
    assert "1,000,000 rows rewritten for 95,000 deleted" in why
    assert readers_waiting(small) is None
    deleted_at = -(-100_000_000 // REWRITE_PER_DELETED_ROW)
    large = activity(100, 100, deleted=deleted_at - 1, records=100_000_000)  # rows not read
    assert readers_triggers(large) == ()
    waits = readers_waiting(large)
    assert waits is not None and f"once {deleted_at:,} are deleted" in waits
    assert readers_triggers(activity(100, 100, deleted_at, 100_000_000)) != ()


def test_piled_up_delete_files_are_merged_not_the_table_rewritten() -> None:
    """A table of 20 data files after 4 batches that each touched every file: its delete
    files are merged (reading the deletes only); rewriting its data files for them would
    cost the whole table every 4 batches."""
    piled = activity(20, DELETE_FILES_PER_DATA_FILE * 20, deleted=50, records=100_000_000)
    assert readers_waiting(piled) is not None
    assert maintenance_due(table_with(None), {}, NOW, activity=piled) == []  # append
    upsert = table_with(None, mode="upsert")
    assert maintenance_due(upsert, {}, NOW, activity=activity(20, 1)) == []
    (due,) = maintenance_due(upsert, {}, NOW, activity=piled)
    assert due.operation == "rewrite_deletes" and due.for_deletes
    assert due.arguments == RewriteDeletesSettings(min_delete_files=MERGE_MIN_DELETE_FILES)
    assert "80 delete files on 20 data files" in due.describe(NOW)


def test_applying_deletes_runs_and_no_merge_before_it() -> None:
    upsert = table_with(None, mode="upsert")
    deleted = -(-1000 // REWRITE_PER_DELETED_ROW)
    both = activity(2, DELETE_FILES_PER_DATA_FILE * 2, deleted=deleted, with_deletes=1000)
    (due,) = maintenance_due(upsert, {}, NOW, activity=both)
    assert due.operation == "apply_deletes" and due.for_deletes
    # Its arguments are the ones Spark's fallback (`OPERATIONS["apply_deletes"]`) runs with.
    assert due.arguments == DeletesCompaction(CompactSettings())
    assert "apply_deletes on orders" in due.describe(NOW)
    assert "of the rows in data files with deletes" in due.describe(NOW)
    assert (
        maintenance_due(upsert, {}, NOW, activity=both, only=frozenset({"expire_snapshots"})) == []
    )
    for only in ({"compact"}, {"apply_deletes"}):  # `--only compact` selects it too
        (due,) = maintenance_due(upsert, {}, NOW, activity=both, only=frozenset(only))
        assert due.operation == "apply_deletes"


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
    assert compact.operation == "apply_deletes" and compact.for_deletes
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


def test_a_table_s_budget_sets_when_deletes_are_applied_for_readers() -> None:
    """`maintenance: deletes_rewrite_budget`: a share of the batches' CPU scales the rows
    rewritten per row deleted; `unbounded` applies the deletes of a 100M-row table after
    its first batch (readers never wait), and plan and `maintain --dry-run` say which."""
    after_one_batch = activity(20, 20, deleted=95_000, records=100_000_000)  # rows not read
    assert readers_triggers(after_one_batch) == ()
    assert readers_waiting(after_one_batch) is not None
    (why,) = readers_triggers(after_one_batch, UNBOUNDED)
    assert "whatever it rewrites: deletes_rewrite_budget unbounded" in why
    assert readers_waiting(after_one_batch, UNBOUNDED) is None

    assert rewrite_per_deleted_row(1.0) == REWRITE_PER_DELETED_ROW
    thirty = rewrite_per_deleted_row(30)
    assert thirty == 1128  # 30 x 47 / 1.25
    deleted_at = -(-100_000_000 // 1128)
    assert readers_triggers(activity(20, 20, deleted_at - 1, 100_000_000), 30) == ()
    waits = readers_waiting(activity(20, 20, deleted_at - 1, 100_000_000), 30.0)
    assert waits is not None and f"once {deleted_at:,} are deleted" in waits
    (why,) = readers_triggers(activity(20, 20, deleted_at, 100_000_000), 30.0)
    assert "at most 1128 per row deleted: its CPU at most 30x the batches'" in why

    assert "(at most 37 rows rewritten per row deleted)" in delete_upkeep()
    assert "(whatever that rewrites)" in delete_upkeep(UNBOUNDED)


def test_the_budget_comes_from_the_table_s_block_with_or_without_operations() -> None:
    after_one_batch = activity(20, 20, deleted=95_000, records=100_000_000)
    assert maintenance_due(table_with(None, mode="upsert"), {}, NOW, activity=after_one_batch) == []
    block = Maintenance.model_validate({"deletes_rewrite_budget": "unbounded"})
    assert block.compact is None and budget_of(block) == UNBOUNDED and budget_of(None) == 1.0
    (due,) = maintenance_due(table_with(block, mode="upsert"), {}, NOW, activity=after_one_batch)
    assert due.operation == "apply_deletes" and due.for_deletes
    assert "deletes_rewrite_budget unbounded" in due.describe(NOW)
    # An append table has no deletes to apply, whatever its block says.
    assert maintenance_due(table_with(block), {}, NOW, activity=after_one_batch) == []


def test_a_budget_is_a_positive_number_or_unbounded() -> None:
    for budget in (0.5, 30, "unbounded"):
        assert Maintenance.model_validate({"deletes_rewrite_budget": budget})
    for bad in (0, -1, True, "lots", "3", float("inf")):
        with pytest.raises(ValidationError, match="deletes_rewrite_budget must be a number"):
            Maintenance.model_validate({"deletes_rewrite_budget": bad})


def test_the_budget_example_in_the_docs_is_a_valid_table() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "maintenance.md").read_text()
    example = text.split("**A table's budget.**", 1)[1].split("```yaml\n", 1)[1].split("```")[0]
    (table,) = yaml.safe_load(example)["tables"]
    config = TableConfig.model_validate(table)
    assert config.maintenance is not None
    assert budget_of(config.maintenance) == UNBOUNDED
