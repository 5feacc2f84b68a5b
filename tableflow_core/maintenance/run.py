"""Running due maintenance on one table (call it under the table's lock)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tableflow_core.maintenance.last_run import last_run_properties
from tableflow_core.maintenance.offsets import committed, set_offsets_property
from tableflow_core.maintenance.operations import OPERATIONS, MaintenanceError, Operation
from tableflow_core.maintenance.report import MaintenanceReport, OperationResult
from tableflow_core.maintenance.schedule import DueOperation
from tableflow_core.maintenance.target import SparkTable
from tableflow_core.state.offsets import CommittedOffsets
from tableflow_core.state.table_state import TableState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The table's state and its current metadata file, read without Spark (the caller's
# catalog client: `tasks/maintain.py` reads it with pyiceberg).
StateReader = Callable[[], tuple[TableState, str | None]]


def run_maintenance(
    spark: SparkSession,
    identifier: str,
    operations: Sequence[DueOperation],
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    redact: Callable[[str], str] = lambda text: text,
    read_state: StateReader | None = None,
    functions: Mapping[str, Operation] = OPERATIONS,
) -> MaintenanceReport:
    """Run `operations` in order on the Spark table `identifier` (`catalog.ns.table`).

    An operation that fails is reported and the next ones still run (a failed
    compaction must not stop expiry). Each successful operation's last-run time is
    written to the table properties at the end. The committed offsets are checked
    after the run: if they were lost, the ones read before are restored and
    MaintenanceError is raised.

    `read_state`: how the offsets and the metadata file are read before and after; else
    with Spark's metadata tables (seven Spark jobs: ~35-45% of a small table's
    maintenance on a loaded 2-core machine, measured with py-spy in `tableflow run`).
    `functions`: each operation's function by name (`operations.OPERATIONS`).
    """
    table = SparkTable.parse(identifier)

    def offsets_and_location() -> tuple[CommittedOffsets | None, str | None]:
        if read_state is None:
            return committed(spark, table), None
        state, location = read_state()
        return state.committed_offsets(), location

    before, _ = offsets_and_location()
    results: list[OperationResult] = []
    for due in operations:
        began = time.monotonic()
        try:
            metrics = functions[due.operation](spark, table, due.arguments, now())
        except Exception as exc:
            results.append(
                OperationResult(
                    due.operation,
                    "error",
                    round(time.monotonic() - began, 3),
                    error=redact(_first_line(exc)),
                )
            )
            continue
        results.append(
            OperationResult(due.operation, "success", round(time.monotonic() - began, 3), metrics)
        )
    done = [r.operation for r in results if r.status == "success"]
    if done:
        pairs = ", ".join(f"'{k}' = '{v}'" for k, v in last_run_properties(done, now()).items())
        spark.sql(f"ALTER TABLE {table.sql} SET TBLPROPERTIES ({pairs})")
    after, location = offsets_and_location()
    if before is not None and after is None:
        set_offsets_property(spark, table, before)
        raise MaintenanceError(
            f"{table}: the committed offsets were no longer readable after maintenance "
            f"({', '.join(done)}); restored {dict(before.offsets)} into the table property"
        )
    return MaintenanceReport(
        identifier=str(table),
        results=tuple(results),
        offsets_before=dict(before.offsets) if before is not None else None,
        offsets_after=dict(after.offsets) if after is not None else None,
        metadata_location=location
        if read_state is not None
        else current_metadata_location(spark, table),
    )


def current_metadata_location(spark: SparkSession, table: SparkTable) -> str | None:
    rows = spark.sql(
        f"SELECT file FROM {table.sql}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    ).collect()
    return str(rows[0].file) if rows else None


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:500]
