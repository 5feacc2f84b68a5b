"""check: the table's data-quality checks (issue #10), run as one validation.

The plan's one Check stage lists every check (one line each in `plan`); they run as one
Spark aggregate (`pipeline.checks.run.run_checks`: one pass of the row count and every
check's failing count). What is validated:

- on an append table whose checks take no rows out (severity warn, or on_failure fail),
  the rows the write appended to the run's branch, as an audit before publish
  (write-audit-publish): the batch is read from Kafka and written in one pass, and the
  checks read back only this run's data files;
- otherwise (skip/dlq checks split the batch before the write; an upsert's branch holds
  the MERGE's result), the batch itself, persisted so Kafka is read once.

Then:

- a failing check with severity error (on_failure fail) stops the run before publish:
  nothing is published, the offsets do not move, the error names the table,
  each failing check, its failing count and sample rows;
- failing rows of skip and dlq checks are taken out of the batch and appended to
  `batch.rejected` for route_bad_records: skip rows are counted as `skipped` in the
  run's accounting, dlq rows are dead-lettered (stage `check`, error class
  `CheckFailed`, message `check <name> failed`);
- the report goes to run_results.json (`batch.checks.report`) and its summary into
  the snapshot summary of the commit that publishes the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tableflow_core.checks import CheckReport, ChecksFailedError
from tableflow_core.errors import IngestError
from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.ingest.columns import TOMBSTONE_COLUMN
from tableflow_core.ingest.stages import Check
from tableflow_core.pipeline.batch import (
    Audit,
    Batch,
    CheckCounting,
    Outcome,
    RejectedRows,
    StageContext,
)
from tableflow_core.pipeline.checks.run import run_checks
from tableflow_core.pipeline.registry import stage_runner
from tableflow_core.schemas.formats import METADATA_PREFIX
from tableflow_core.sql_text import quote_ident

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import Column, DataFrame, SparkSession

    from tableflow_core.checks.compile import CompiledCheck, CompiledChecks


class ChecksFailed(IngestError):
    """A check with severity error and on_failure fail failed: nothing was published.
    `report`: the checks' report (run_results.json `checks` of the failed run)."""

    def __init__(self, message: str, report: dict[str, Any]) -> None:
        super().__init__(message)
        self.report = report


def judge(context: StageContext, report: CheckReport) -> None:
    """The checks' verdict on the run: a warning line per check that warned (or took rows
    out), and ChecksFailed (with the report) when one blocks the publish."""
    context.warnings.extend(report.warnings())
    try:
        report.raise_for_failures()
    except ChecksFailedError as exc:
        raise ChecksFailed(str(exc), report.as_dict()) from exc


@stage_runner(Check)
def check(context: StageContext, spec: Check, batch: Batch) -> Batch:
    compiled = context.compiled("checks")
    assert batch.good is not None, "check needs the decode stage before it"
    if _audits_written_rows(context, compiled.checks.checks):
        counting = CheckCounting()  # its report is set by the audit (none if it never ran)
        audit = ChecksOnWrittenRows(compiled.checks, counting.report)
        return batch.evolve(audits=(*batch.audits, audit), checks=counting)
    # Validated, then written (and split when a check fails): read Kafka and transform once.
    persisted = batch.good.persist()

    def release() -> None:
        persisted.unpersist()

    context.cleanups.append(release)
    checked, deletes = _without_tombstones(persisted)
    run = run_checks(
        checked,
        compiled.checks,
        context.spark,
        table=f"{context.spec.table_name} ({context.spec.identifier})",
    )
    judge(context, run.report)
    rejected = batch.rejected
    if run.rejected_count:
        rejected = (*rejected, RejectedRows(policy="dlq", rows=run.rejected_df))
    if run.skipped_count and run.skipped_df is not None:
        # Counted per partition as `skipped` by the run's accounting (not `filtered`).
        rejected = (*rejected, RejectedRows(policy="skip", rows=run.skipped_df))
    return batch.evolve(
        good=run.passing_df if deletes is None else run.passing_df.unionByName(deletes),
        checks=CheckCounting(
            Outcome(run.report.as_dict()),
            skipped=run.skipped_count,
            dead_lettered=run.rejected_count,
        ),
        rejected=rejected,
        snapshot_properties={**batch.snapshot_properties, **run.report.summary_properties()},
    )


def _without_tombstones(batch: DataFrame) -> tuple[DataFrame, DataFrame | None]:
    """(rows to check, upsert tombstones). A tombstone carries only its key: checks judge
    records, and a delete must reach the MERGE whatever the checks say."""
    from pyspark.sql import functions as F

    if TOMBSTONE_COLUMN not in batch.columns:
        return batch, None
    tombstone = F.col(TOMBSTONE_COLUMN)
    return batch.where(~tombstone), batch.where(tombstone)


def _audits_written_rows(context: StageContext, checks: Sequence[CompiledCheck]) -> bool:
    """Checks that take no rows out of an append table's batch judge the rows the write put
    on the run's branch (write-audit-publish): the batch is then read from Kafka once,
    written, and never cached. Skip/dlq checks must split the batch before the write, and
    an upsert's branch holds the MERGE's result, not the batch, so both keep the cache."""
    return context.spec.mode == "append" and not any(c.splits_rows for c in checks)


@dataclass(frozen=True)
class ChecksOnWrittenRows(Audit):
    """The checks, run on the rows this run appended to its branch. A failing error check
    raises before publish (nothing is published, the offsets do not move); the report goes
    to `report` (run_results.json) and its summary into the publish commit."""

    compiled: CompiledChecks
    report: Outcome[dict[str, Any]]

    def run(self, context: StageContext, batch: Batch) -> None:
        # Not cached: the checks' pass reads only the columns the checks need
        # from this run's Parquet files, cheaper than caching every column (1M rows:
        # ~1 s against ~8 s).
        written = _appended_rows(context)
        # `unique` keys no two rows the read tasks decoded share (pipeline/checks/read_task_unique.py)
        reports = batch.key_reports
        run = run_checks(
            written,
            self.compiled,
            context.spark,
            table=f"{context.spec.table_name} ({context.spec.identifier})",
            distinct_keys=reports.distinct() if reports is not None else (),
            # The rows written, as the write got them: with their source positions.
            samples_from=batch.good,
        )
        self.report.value = run.report.as_dict()
        context.publish_properties.update(run.report.summary_properties())
        judge(context, run.report)


def _appended_rows(context: StageContext) -> DataFrame:
    """The rows the run's write appended to its branch (only this run's data files)."""
    spec = context.spec
    table = context.catalog.catalog.load_table((*spec.namespace, spec.table))
    head = table.metadata.refs[context.branch].snapshot_id
    if head == context.base_snapshot_id:  # the write appended nothing
        return _with_positions(context.spark.table(spec.identifier).limit(0))
    return _with_positions(
        read_appended(context.spark, spec.identifier, table, context.base_snapshot_id, head)
    )


def read_appended(
    spark: SparkSession, identifier: str, table: Table, base: int | None, head: int
) -> DataFrame:
    """An incremental scan of Spark table `identifier` (pyiceberg `table`) from snapshot
    `base` to `head`, split so that every core reads (see `_split_size`)."""
    reader = (
        spark.read.format("iceberg")
        .option("start-snapshot-id", str(base))
        .option("end-snapshot-id", str(head))
    )
    split = _split_size(appended_bytes(table, head, base), spark.sparkContext.defaultParallelism)
    if split is not None:
        reader = reader.option("split-size", str(split))
    return reader.load(identifier)


# Iceberg packs a scan's files into read tasks of up to 128 MB (`read.split.target-size`):
# one run's files (1M rows: 4 files, ~5 MB) became one task, so the checks' passes read
# and shuffled them on one core. Smaller splits give each core tasks of its own.
_DEFAULT_SPLIT_BYTES = 128 * 1024 * 1024
_TASKS_PER_CORE = 2


def _split_size(size: int, parallelism: int) -> int | None:
    """The read split size giving the audit about `_TASKS_PER_CORE` tasks per core (None:
    Iceberg's default already does, or nothing to read). Parquet is split at row groups,
    so a file of one row group stays one task whatever the size."""
    if size <= 0:
        return None
    split = -(-size // max(1, parallelism * _TASKS_PER_CORE))
    return split if split < _DEFAULT_SPLIT_BYTES else None


def appended_bytes(table: Table, head: int, base: int | None) -> int:
    """Bytes of the data files the snapshots after `base` up to `head` added (their
    summaries' `added-files-size`; 0 when a summary does not say)."""
    total = 0
    snapshot = table.snapshot_by_id(head)
    while snapshot is not None and snapshot.snapshot_id != base:
        summary = snapshot.summary
        added = summary.get("added-files-size") if summary is not None else None
        total += int(added) if added is not None else 0
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return total


def _with_positions(rows: DataFrame) -> DataFrame:
    """The hidden source-position columns the checks' samples name, from the table's
    partition and offset metadata columns when it has them (else NULL)."""
    from pyspark.sql import functions as F

    def position(metadata: str, hidden: str, kind: str) -> Column:
        name = f"{METADATA_PREFIX}{metadata}"
        value = F.col(quote_ident(name)) if name in rows.columns else F.lit(None)
        return value.cast(kind).alias(hidden)

    return rows.select(
        "*",
        position("partition", SOURCE_PARTITION_COLUMN, "int"),
        position("offset", SOURCE_OFFSET_COLUMN, "long"),
    )
