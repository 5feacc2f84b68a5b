"""check: the table's data-quality checks (issue #10), run as one validation.

Plan emits one Check stage per configured check (one line each in `plan`); all of them
run at the first, as one great-expectations validation over the persisted batch
(`checks.run.run_checks`: a count, then two bundled aggregate passes, whatever the
number of checks); the later check stages pass the batch on. Then:

- a failing check with severity error (on_failure fail) stops the run before anything
  is written: nothing is published, the offsets do not move, the error names the table,
  each failing check, its failing count and sample rows;
- failing rows of skip and dlq checks are taken out of the batch and appended to
  `batch.rejected` for route_bad_records: skip rows are counted as `skipped` in the
  run's accounting, dlq rows are dead-lettered (stage `check`, error class
  `CheckFailed`, message `check <name> failed`);
- the report goes to run_results.json (`batch.results["checks"]`) and its summary into
  the snapshot summary of the commit the write makes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tableflow_core.pipeline.batch import Batch, RejectedRows, StageContext
from tableflow_core.pipeline.errors import IngestError
from tableflow_core.pipeline.registry import stage_runner
from tableflow_core.pipeline.stages import Check

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class ChecksFailed(IngestError):
    """A check with severity error and on_failure fail failed: nothing was published."""


@stage_runner(Check)
def check(context: StageContext, spec: Check, batch: Batch) -> Batch:
    compiled = context.spec.compiled
    if compiled is None:
        raise NotImplementedError(f"{context.where()}: checks were not compiled for this run")
    if spec.index != 0:
        return batch  # every check ran at the first check stage
    from tableflow_core.checks import ChecksFailedError
    from tableflow_core.checks.run import prepare_great_expectations, run_checks

    assert batch.good is not None, "check needs the decode stage before it"
    # Its import overlaps the job below that reads Kafka, decodes and transforms.
    prepare_great_expectations()
    # Counted, validated (two passes), then written: read Kafka and transform once.
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
    try:
        run.report.raise_for_failures()
    except ChecksFailedError as exc:
        raise ChecksFailed(str(exc)) from exc
    skipped = run.skipped_count + batch.counter("rows_skipped")
    counters = {
        **batch.counters,
        "rows_skipped": skipped,
        "check_skipped": run.skipped_count,
        "check_dead_lettered": run.rejected_count,
    }
    rejected = tuple(batch.rejected)
    if run.rejected_count:
        rejected = (*rejected, RejectedRows(policy="dlq", rows=run.rejected_df))
    if run.skipped_count and run.skipped_df is not None:
        # Counted per partition as `skipped` by the run's accounting (not `filtered`).
        rejected = (*rejected, RejectedRows(policy="skip", rows=run.skipped_df))
    return batch.evolve(
        good=run.passing_df if deletes is None else run.passing_df.unionByName(deletes),
        counters=counters,
        rejected=rejected,
        snapshot_properties={**batch.snapshot_properties, **run.report.summary_properties()},
        results={**batch.results, "checks": run.report.as_dict()},
    )


def _without_tombstones(batch: DataFrame) -> tuple[DataFrame, DataFrame | None]:
    """(rows to check, upsert tombstones). A tombstone carries only its key: checks judge
    records, and a delete must reach the MERGE whatever the checks say."""
    from pyspark.sql import functions as F

    from tableflow_core.pipeline.columns import TOMBSTONE_COLUMN

    if TOMBSTONE_COLUMN not in batch.columns:
        return batch, None
    tombstone = F.col(TOMBSTONE_COLUMN)
    return batch.where(~tombstone), batch.where(tombstone)
