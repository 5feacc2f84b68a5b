"""A small batch of dead letters appended to an Iceberg table by the driver, idempotently.

Spark's MERGE (sinks/iceberg_table.py) costs seconds even for a handful of rows (plans, a
join job, a commit through the JVM); most runs route a few to a few thousand records.
Up to `DRIVER_MAX_ROWS` of them, the driver instead:

1. scans the dead-letter table (pyiceberg, at its current snapshot S) for the rows already
   there in the batch's source partitions and offset ranges (`key_filter`: a few files,
   pruned by the column metrics of the key columns), and keeps the batch's rows whose key
   (source topic, partition, offset, stage) is not among them;
2. writes them as data files and appends them in one commit that the catalog accepts only
   while `main` is still at S (assert-ref-snapshot-id).

pyiceberg retries a refused commit on the new head by itself; this append lets it only
when no data file added since S may hold one of the batch's keys (`_KeysUnchangedAppend`,
Iceberg's serializable check of an append with a conflict filter): a concurrent writer of
other records (another source table sharing the dead-letter table, compaction) costs a
retry, never a duplicate. Otherwise the append fails (ValidationException) and is done
again from step 1, at most `APPEND_ATTEMPTS` times. A re-run after a crash between this
commit and the source table's publish finds its rows at step 1 and adds nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import (
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    LessThanOrEqual,
    Or,
)
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _MergeAppendFiles
from pyiceberg.table.update.validate import _validate_added_data_files

from tableflow_core.catalog.transactions import transaction as transaction_of
from tableflow_core.deadletter.errors import DeadLetterTableError
from tableflow_core.ingest.bad_records import BAD_RECORD_SCHEMA, DLQ_KEY_COLUMNS

# Above this many rows a batch goes through Spark's MERGE: the driver holds the batch in
# memory and the anti-join's scan reads the keys of the offset ranges it spans.
DRIVER_MAX_ROWS = 50_000
# Users may lower or raise it; 0 sends every batch through Spark's MERGE.
DRIVER_MAX_ROWS_ENV = "TABLEFLOW_DLQ_DRIVER_MAX_ROWS"
APPEND_ATTEMPTS = 4
WRITER_PROPERTY = "tableflow.dead-letter.writer"  # in the summary of the append's snapshot
DRIVER_WRITER = "driver"

_ROW = "__tf_row"

WriteDataFiles = Callable[[Any, pa.Table], list[Any]]


def driver_max_rows(environ: Mapping[str, str] | None = None) -> int:
    """The row budget of the driver's append: `DRIVER_MAX_ROWS` unless the environment
    sets `TABLEFLOW_DLQ_DRIVER_MAX_ROWS`."""
    value = (os.environ if environ is None else environ).get(DRIVER_MAX_ROWS_ENV, "").strip()
    if not value:
        return DRIVER_MAX_ROWS
    try:
        rows = int(value)
    except ValueError:
        rows = -1
    if rows < 0:
        raise DeadLetterTableError(
            f"{DRIVER_MAX_ROWS_ENV}={value!r}: expected a number of rows (0 or more)"
        )
    return rows


def key_filter(rows: pa.Table) -> BooleanExpression:
    """The rows of a dead-letter table that may share a key with `rows`: per source topic
    and partition, the offsets between the batch's first and last (`rows` is not empty)."""
    spans = rows.group_by(["source_topic", "source_partition"]).aggregate(
        [("source_offset", "min"), ("source_offset", "max")]
    )
    ranges: list[BooleanExpression] = [
        And(
            EqualTo(term="source_topic", value=span["source_topic"]),
            EqualTo(term="source_partition", value=span["source_partition"]),
            GreaterThanOrEqual(term="source_offset", value=span["source_offset_min"]),
            LessThanOrEqual(term="source_offset", value=span["source_offset_max"]),
        )
        for span in spans.to_pylist()
    ]
    return ranges[0] if len(ranges) == 1 else Or(*ranges)


def not_in_table(table: Any, rows: pa.Table, where: BooleanExpression) -> pa.Table:
    """`rows` whose key is not in `table` (pyiceberg, at its current snapshot)."""
    keys = list(DLQ_KEY_COLUMNS)
    present = table.scan(row_filter=where, selected_fields=tuple(keys)).to_arrow()
    if present.num_rows == 0:
        return rows
    present = present.select(keys).cast(pa.schema([BAD_RECORD_SCHEMA.field(k) for k in keys]))
    # Joined on the keys and a row number only: Arrow's join carries no nested columns.
    numbered = rows.select(keys).append_column(_ROW, pa.array(range(rows.num_rows), pa.int64()))
    fresh = numbered.join(present, keys=keys, join_type="left anti")
    return rows.take(fresh[_ROW])  # any order: the append sorts by key


class _KeysUnchangedAppend(_MergeAppendFiles):
    """A merge append that pyiceberg may retry on a newer head only when no data file added
    in between may hold a row matching `conflict_filter`."""

    def __init__(
        self,
        transaction: Any,
        io: Any,
        conflict_filter: BooleanExpression,
        properties: dict[str, str],
    ) -> None:
        super().__init__(
            operation=Operation.APPEND,
            transaction=transaction,
            io=io,
            snapshot_properties=properties,
        )
        self._conflict_filter = conflict_filter

    def _validate_concurrency(self) -> None:
        window = self._commit_window
        if window is None or window.is_empty() or window.head is None:
            return
        _validate_added_data_files(
            self._transaction._table, window.head, self._conflict_filter, window.base
        )


@dataclass(frozen=True)
class DriverAppend:
    """What one append did: rows added (the others were in the table already), attempts."""

    added: int
    attempts: int


def append_new_rows(
    load: Callable[[], Any],
    write_data_files: WriteDataFiles,
    rows: pa.Table,
    properties: Mapping[str, str] | None = None,
    before_commit: Callable[[], None] | None = None,
) -> DriverAppend:
    """Append the rows of `rows` (BAD_RECORD_SCHEMA) whose key the table (`load()`:
    pyiceberg, freshly loaded: its own object, which nothing else commits through) does
    not hold yet, exactly once. `before_commit()` runs between the scan and the commit
    (tests: a concurrent writer)."""
    rows = rows.cast(BAD_RECORD_SCHEMA)
    where = key_filter(rows)
    summary = {**(properties or {}), WRITER_PROPERTY: DRIVER_WRITER}
    for attempt in range(1, APPEND_ATTEMPTS + 1):
        table = load()
        fresh = not_in_table(table, rows, where)
        if fresh.num_rows == 0:
            return DriverAppend(0, attempt)
        ordered = fresh.sort_by([(c, "ascending") for c in DLQ_KEY_COLUMNS[:3]])
        data_files = write_data_files(table, ordered)
        if before_commit is not None:
            before_commit()
        transaction = transaction_of(table)
        with _KeysUnchangedAppend(transaction, table.io, where, summary) as append:
            for data_file in data_files:
                append.append_data_file(data_file)
        try:
            transaction.commit_transaction()
        except (CommitFailedException, ValidationException):
            _delete_quietly(table.io, [f.file_path for f in data_files])
            if attempt == APPEND_ATTEMPTS:
                raise
            continue
        return DriverAppend(ordered.num_rows, attempt)
    raise AssertionError("unreachable")  # the loop returns or raises


def _delete_quietly(io: Any, paths: list[str]) -> None:
    """Data files of a refused append (referenced by nothing); a leftover is an orphan."""
    for path in paths:
        with contextlib.suppress(Exception):  # best effort: an orphan file is harmless
            io.delete(path)
