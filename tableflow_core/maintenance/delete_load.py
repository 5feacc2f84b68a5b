"""When an upsert table's delete files cost too much: maintenance due by the delete files,
not by the clock (docs/maintenance.md, "Delete files in check").

Every upsert batch leaves a position delete file per data file it touched (random keys:
every data file), and every reader applies them on every scan. What it costs them
(benchmarks/deletes_reader_cost.py) follows two things, each with its remedy, due with or
without a `maintenance:` block:

- the rows of the data files that carry deletes: pyiceberg scans such a file at ~3x its
  cost without (its position-delete path builds a position array in Python per batch and
  copies every batch), however few rows are deleted. Over `READERS_SHARE` of the table's
  rows in such files, pyiceberg pays more than 1.5x a compacted scan. The deletes are
  then **applied** (`apply_deletes`: every data file with a delete file rewritten without
  its deleted rows, whatever its size, the delete files dropped; on the driver,
  pipeline/apply_deletes.py), as soon as the rewrite costs at most
  `REWRITE_PER_DELETED_ROW` rows per row the delete files delete. That budget is one of
  CPU: the rewrite may cost `MAINTENANCE_CPU_SHARE` of the ingest CPU of the batches
  whose deletes it applies (each measured per row), so maintenance follows the rows the
  batches changed, never the table's size. A table's `maintenance:
  deletes_rewrite_budget` sets its own share, or `unbounded` (after every batch that
  leaves readers paying, whatever that rewrites). A table whose batches change a
  `REWRITE_PER_DELETED_ROW`th of it is back at 1.0x after every batch; a larger one waits
  until they have.
- the delete files per data file: DuckDB and pyiceberg open each. Past
  `DELETE_FILES_PER_DATA_FILE` per data file they are **merged** (`rewrite_deletes`,
  `rewrite_position_delete_files`): it reads the deletes only.

Applying the deletes drops the delete files too, so the merge is due only without it.
Compacting the whole table by the count of delete files (the first design) rewrote a
table of 100M rows every 4 batches: a batch's cost then followed the table.
`tableflow run` runs them after the table's refresh, `tableflow maintain` when due; `plan`
and `maintain --dry-run` show them like any due operation, and `maintain --dry-run` why
the rewrite readers need still waits.

Pure: the table's activity (`activity.TableActivity`: its snapshot's totals, and the rows
of the data files with deletes read from its manifests) decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from tableflow_core.config.models.maintenance import (
    DEFAULT_DELETES_REWRITE_BUDGET,
    UNBOUNDED,
    CompactSettings,
    DeletesRewriteBudget,
    Maintenance,
)
from tableflow_core.maintenance.activity import TableActivity

# The operation that rewrites the data files with deletes without their deleted rows
# (`maintain` runs pipeline/apply_deletes.py on the driver; without a catalog client,
# Spark's `rewrite_data_files`: `operations.OPERATIONS`).
APPLY_DELETES = "apply_deletes"
DELETE_FILES_PER_DATA_FILE = 4
# Readers stay under 1.5x a compacted scan while at most this share of the rows is in data
# files with deletes (pyiceberg: ~3x on those rows, 1 + 0.25 * 2 = 1.5).
READERS_SHARE = 0.25
# The rewrite for readers costs at most this share of the ingest CPU of the batches whose
# deletes it applies. Measured on 2 cores (docs/maintenance.md, "Delete files in check"):
# the driver's rewrite costs REWRITE_CPU_US_PER_ROW per row of the files it rewrites
# (benchmarks/apply_deletes_cost.py: 12.4 CPU s for 10M rows; Spark's rewrite_data_files
# 66), an upsert batch INGEST_CPU_US_PER_DELETED_ROW of its process tree per row it
# deletes (benchmarks/upsert.py: a 100k-record batch, ~95k rows deleted, 4.5 CPU s at 1M
# and 100M rows alike). At 1.0, maintenance for readers at most doubles an upsert table's
# CPU (Spark's rewrite at the budget before, 20 rows per row deleted: ~2.8x). A table's
# `maintenance: deletes_rewrite_budget` sets its own share, or `unbounded`.
MAINTENANCE_CPU_SHARE = DEFAULT_DELETES_REWRITE_BUDGET
REWRITE_CPU_US_PER_ROW = 1.25
INGEST_CPU_US_PER_DELETED_ROW = 47.0


def _rows_per_deleted_row(cpu_share: float) -> int:
    return max(1, int(cpu_share * INGEST_CPU_US_PER_DELETED_ROW / REWRITE_CPU_US_PER_ROW))


# By default it rewrites at most this many rows per row the delete files delete (a table of
# 100M rows whose batches touch every data file: every ~2.7M rows deleted, ~29 batches).
REWRITE_PER_DELETED_ROW = _rows_per_deleted_row(MAINTENANCE_CPU_SHARE)


def budget_of(block: Maintenance | None) -> DeletesRewriteBudget:
    """A table's budget for the rewrite for readers: its `maintenance:` block's, or 1x."""
    return block.deletes_rewrite_budget if block is not None else MAINTENANCE_CPU_SHARE


def rewrite_per_deleted_row(budget: DeletesRewriteBudget) -> int | None:
    """The rows the rewrite for readers may rewrite per row the delete files delete, under
    `budget` (a share of the batches' CPU); None: `unbounded`, whatever it rewrites."""
    if budget == UNBOUNDED:
        return None
    return _rows_per_deleted_row(float(budget))


# Spark's fallback (`operations.OPERATIONS[APPLY_DELETES]`): a data file with at least
# this many delete files is rewritten.
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


def _rows_to_rewrite(activity: TableActivity) -> int:
    """The rows of the data files with deletes (all of the table's, if not read)."""
    if activity.rows_with_deletes is None:
        return activity.records
    return activity.rows_with_deletes


def _budget_said(budget: DeletesRewriteBudget) -> str:
    per_row = rewrite_per_deleted_row(budget)
    if per_row is None:
        return "whatever it rewrites: deletes_rewrite_budget unbounded"
    return f"at most {per_row} per row deleted: its CPU at most {float(budget):g}x the batches'"


def readers_triggers(
    activity: TableActivity | None, budget: DeletesRewriteBudget = MAINTENANCE_CPU_SHARE
) -> tuple[str, ...]:
    """Why the deletes are due to be applied for readers now (empty: they are not: few
    rows carry deletes, or the rewrite waits for its `budget`)."""
    if activity is None or activity.delete_files == 0 or not activity.records:
        return ()
    rows = _rows_to_rewrite(activity)
    if rows <= READERS_SHARE * activity.records:
        return ()
    per_row = rewrite_per_deleted_row(budget)
    if per_row is not None and rows > per_row * activity.deleted_rows:
        return ()
    return (
        f"{rows / activity.records:.0%} of the rows in data files with deletes (due above "
        f"{READERS_SHARE:.0%}); {rows:,} rows rewritten for {activity.deleted_rows:,} deleted "
        f"({_budget_said(budget)})",
    )


def readers_waiting(
    activity: TableActivity | None, budget: DeletesRewriteBudget = MAINTENANCE_CPU_SHARE
) -> str | None:
    """Why readers pay over the bound and the rewrite still waits for its `budget` (None:
    they do not), for `maintain --dry-run`."""
    if activity is None or activity.delete_files == 0 or not activity.records:
        return None
    rows = _rows_to_rewrite(activity)
    if rows <= READERS_SHARE * activity.records or readers_triggers(activity, budget):
        return None
    per_row = rewrite_per_deleted_row(budget)
    assert per_row is not None  # an unbounded rewrite never waits
    deleted_at = -(-rows // per_row)
    return (
        f"apply_deletes for readers waits: {rows / activity.records:.0%} of the rows in data files "
        f"with deletes, their {rows:,} rows rewritten once {deleted_at:,} are deleted "
        f"({activity.deleted_rows:,} now; at most {per_row} per row deleted)"
    )


def delete_upkeep(budget: DeletesRewriteBudget = MAINTENANCE_CPU_SHARE) -> str:
    """The rule, as plan and `maintain --dry-run` show it for an upsert table."""
    per_row = rewrite_per_deleted_row(budget)
    rewritten = (
        "whatever that rewrites"
        if per_row is None
        else f"at most {per_row} rows rewritten per row deleted"
    )
    return (
        f"delete files merged at {DELETE_FILES_PER_DATA_FILE} per data file, deletes applied "
        f"to the data files with deletes above {READERS_SHARE:.0%} of rows ({rewritten})"
    )
