"""When an upsert table's delete files cost too much: maintenance due by the delete files,
not by the clock (docs/maintenance.md, "Delete files in check").

Every upsert batch leaves a position delete file per data file it touched (a batch's keys
are spread over the whole table, so that is every data file), and every reader applies
them all on every scan. Two costs grow, and each has its own remedy, due with or without
a `maintenance:` block once the current snapshot's totals (the summary: no manifest or
data file is read) say:

- `DELETE_FILES_PER_DATA_FILE` delete files per data file on average: readers open that
  many files per data file. The delete files are **merged** (`rewrite_deletes`,
  `rewrite_position_delete_files`): it reads the deletes only, so its cost follows the
  batches that wrote them, not the table;
- position deletes for `DELETED_ROWS_SHARE` of the rows the data files hold: readers read
  and drop that many rows. The table is **compacted**: every data file with a delete file
  is rewritten, whatever its size (`delete-file-threshold` 1), and the delete files left
  dangling are dropped. Its cost is the table's size, but it comes once per
  `DELETED_ROWS_SHARE` of the table deleted: rows rewritten per row deleted stay at
  1 / `DELETED_ROWS_SHARE`, whatever the table's size.

A compaction due drops the delete files too, so the merge is due only without it.
Compacting for the count of delete files instead (the first design) rewrote a table of
100M rows in 20 data files every 4 batches: a batch's cost then followed the table.
`tableflow run` runs them after the table's refresh, `tableflow maintain` when due; `plan`
and `maintain --dry-run` show them like any due operation. What readers pay between them:
benchmarks/upsert_deletes_scan.py (docs/maintenance.md).

Pure: the table's activity (`activity.TableActivity`, its loaded metadata) decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from tableflow_core.config.models.maintenance import CompactSettings
from tableflow_core.maintenance.activity import TableActivity

DELETE_FILES_PER_DATA_FILE = 4
DELETED_ROWS_SHARE = 0.2
# A data file with at least this many delete files is rewritten by the compaction.
DELETE_FILE_THRESHOLD = 1
# The merge of delete files due by their count rewrites a partition's from two files on
# (a table's `rewrite_deletes` block keeps its own `min_delete_files`).
MERGE_MIN_DELETE_FILES = 2


@dataclass(frozen=True)
class DeletesCompaction:
    """What a compaction due by delete files runs with: the compaction's settings (the
    table's `compact` block, or the defaults), and every data file with
    `delete_file_threshold` delete files rewritten whatever its size."""

    settings: CompactSettings
    delete_file_threshold: int = DELETE_FILE_THRESHOLD


def delete_file_triggers(activity: TableActivity | None) -> tuple[str, ...]:
    """Why the table's delete files are due to be merged now (empty: they are not)."""
    if activity is None or activity.delete_files == 0 or activity.data_files == 0:
        return ()
    if activity.delete_files < DELETE_FILES_PER_DATA_FILE * activity.data_files:
        return ()
    return (
        f"{activity.delete_files} delete files on {activity.data_files} data files "
        f"(due at {DELETE_FILES_PER_DATA_FILE} per data file)",
    )


def deleted_rows_triggers(activity: TableActivity | None) -> tuple[str, ...]:
    """Why the rows its delete files delete make a compaction due now (empty: they do not)."""
    if activity is None or activity.delete_files == 0 or not activity.records:
        return ()
    if activity.deleted_rows < DELETED_ROWS_SHARE * activity.records:
        return ()
    share = activity.deleted_rows / activity.records
    return (f"{share:.0%} of the rows deleted by delete files (due at {DELETED_ROWS_SHARE:.0%})",)


def delete_upkeep() -> str:
    """The rule, as plan and `maintain --dry-run` show it for an upsert table."""
    return (
        f"delete files merged at {DELETE_FILES_PER_DATA_FILE} per data file, compacted at "
        f"{DELETED_ROWS_SHARE:.0%} of rows deleted"
    )
