"""When an upsert table's delete files cost its readers too much: a compaction due by the
delete files, not by the clock (docs/maintenance.md, "Delete files in check").

Every upsert batch leaves a position delete file per data file it touched (a batch's keys
are spread over the whole table, so that is every data file), and every reader applies
them all on every scan until a compaction rewrites the data files without the deleted
rows. So an upsert table is compacted, with or without a `maintenance:` block, once its
current snapshot's totals (the summary: no manifest or data file is read) say that
readers apply either

- `DELETE_FILES_PER_DATA_FILE` delete files per data file on average, or
- position deletes for `DELETED_ROWS_SHARE` of the rows its data files hold,

whichever comes first; the compaction rewrites every data file that has a delete file,
whatever its size (`delete-file-threshold` 1), and drops the delete files left dangling.
`tableflow run` runs it after the table's refresh, `tableflow maintain` when it is due;
`plan` and `maintain --dry-run` show it like any due operation. The thresholds are a
first choice, not yet measured: benchmarks/upsert_deletes_scan.py measures a full scan
after each batch with and without this compaction against the compacted table, to set
them so that readers pay at most 1.5x a compacted scan between compactions.

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


@dataclass(frozen=True)
class DeletesCompaction:
    """What a compaction due by delete files runs with: the compaction's settings (the
    table's `compact` block, or the defaults), and every data file with
    `delete_file_threshold` delete files rewritten whatever its size."""

    settings: CompactSettings
    delete_file_threshold: int = DELETE_FILE_THRESHOLD


def delete_load_triggers(activity: TableActivity | None) -> tuple[str, ...]:
    """Why the table's delete files make a compaction due now (empty: they do not)."""
    if activity is None or activity.delete_files == 0 or activity.data_files == 0:
        return ()
    triggers = []
    due_files = DELETE_FILES_PER_DATA_FILE * activity.data_files
    if activity.delete_files >= due_files:
        triggers.append(
            f"{activity.delete_files} delete files on {activity.data_files} data files "
            f"(due at {DELETE_FILES_PER_DATA_FILE} per data file)"
        )
    if activity.records and activity.deleted_rows >= DELETED_ROWS_SHARE * activity.records:
        share = activity.deleted_rows / activity.records
        triggers.append(
            f"{share:.0%} of the rows deleted by delete files (due at {DELETED_ROWS_SHARE:.0%})"
        )
    return tuple(triggers)


def delete_upkeep() -> str:
    """The rule, as plan and `maintain --dry-run` show it for an upsert table."""
    return (
        f"delete files compacted at {DELETE_FILES_PER_DATA_FILE} per data file or "
        f"{DELETED_ROWS_SHARE:.0%} of rows deleted"
    )
