"""transform: the table's transforms (issue #10), run as one compiled chain.

The plan compiled the chain (`IngestSpec.compiled`, plan/compiled.py) and its one
Transform stage lists the steps Spark runs, in the order it runs them
(`ingest/placement.py`); they run here as one projection with one counting
observation (`pipeline.transforms.spark.apply_transforms`). Steps the read tasks ran are
left out (the plan shows them under the decode stage): masks of text columns, and an
append table's dedup when it runs in the read tasks (`pipeline/transforms/read_task_dedup.py`;
the duplicates they flagged are counted by the decode stage and added to the chain's
counts).
Append tables with a `dedup` then drop rows whose key is already in the table (main's
snapshot the run's branch starts at): replaying a batch writes nothing twice. The
batch's keys are looked up in the table's key set (`pipeline/dedup_index.py`, kept
warm between a `tableflow run`'s batches), or, where there is none, the batch is
anti-joined with the table's key column.

The transformed rows are then aligned to the table (`align_to_table`): a column the table
keeps for a field the topic's schema no longer has is filled with NULL.

Rows a derive rejects go by the table's `on_error`: `fail` adds an audit that stops the
run before publish; `skip` and `dlq` reach route_bad_records as `batch.rejected`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tableflow_core.engine.observations import observe_counts
from tableflow_core.errors import FailedRecord, IngestError
from tableflow_core.ingest.placement import read_task_dedup_step
from tableflow_core.ingest.stages import RouteBadRecords, Transform
from tableflow_core.pipeline.batch import (
    Audit,
    Batch,
    RejectedRows,
    StageContext,
    TransformCounting,
)
from tableflow_core.pipeline.dedup_index import keep_key_set, key_set_at
from tableflow_core.pipeline.key_index import KeyCollision
from tableflow_core.pipeline.registry import stage_runner
from tableflow_core.pipeline.transforms.spark import (
    TransformResult,
    align_to_table,
    apply_transforms,
    dedup_against_table,
    drop_rows_held,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation

    from tableflow_core.pipeline.transforms.spark import TransformResult
    from tableflow_core.transforms.compile import CompiledTransforms

MAX_REPORTED_REJECTS = 5


def table_on_error(context: StageContext) -> str:
    """The table's `on_error`, as its route_bad_records stage carries it."""
    routes = [s for s in context.spec.stages if isinstance(s, RouteBadRecords)]
    return routes[0].on_error if routes else "fail"


def _rows_after(good: DataFrame) -> tuple[DataFrame, Observation]:
    """Count the rows leaving the stage during the first action that reads them."""

    return observe_counts(good, "transformed", {"rows": "count(1)"})


@dataclass(frozen=True)
class FailOnRejectedRows(Audit):
    """`on_error: fail`: rows a derive or a CAST rejected stop the run before publish,
    naming the first of them."""

    result: TransformResult

    def run(self, context: StageContext, batch: Batch) -> None:
        rejected = self.result.counts().rejected
        if not rejected:
            return
        rows = (
            self.result.rejected_df.orderBy("source_partition", "source_offset")
            .limit(MAX_REPORTED_REJECTS)
            .collect()
        )
        failures = [
            FailedRecord(
                context.spec.topic,
                int(r["source_partition"]),
                int(r["source_offset"]),
                str(r["error_message"]),
            )
            for r in rows
        ]
        listed = "; ".join(
            f"partition {f.partition} offset {f.offset}: {f.reason}" for f in failures
        )
        # With its failures, `tableflow run` suspends the table as for a decode failure.
        raise IngestError(
            f"table {context.spec.table_name} ({context.spec.identifier}): {rejected} row(s) "
            f"rejected by the transforms (on_error fail), nothing was committed: {listed}",
            failures,
            run_id=context.run_id,
        )


@stage_runner(Transform)
def transform(context: StageContext, spec: Transform, batch: Batch) -> Batch:
    compiled = context.compiled("transforms")
    assert batch.good is not None, "transform needs the decode stage before it"
    chain = compiled.transforms
    # The masks the decode stage ran already (transforms/decode_masks.py) are left out, and
    # so is a dedup the read tasks ran (pipeline/transforms/read_task_dedup.py).
    in_spark = compiled.transforms_in_spark(context.spec.key_columns)
    if batch.key_reports is not None and batch.key_reports.keys.flags:  # decode's decision
        in_tasks = read_task_dedup_step(in_spark)
        assert in_tasks is not None, "the read tasks ran a dedup the chain does not start with"
        in_spark = in_spark.without((in_tasks,))
    # No step left for Spark (masks ran while decoding, a dedup in the read tasks): no
    # projection, no counting observation (1M rows with three masks: ~0.1 s of the
    # driver's time and a pass of per-row bookkeeping in the JVM).
    result = _apply(context, batch.good, in_spark) if in_spark.steps else None
    # Columns the table keeps for fields the topic's schema no longer has get NULLs.
    table_schema = context.spark.table(context.branch_identifier).schema
    good = align_to_table(result.df if result is not None else batch.good, table_schema)
    # Nothing is already in an empty table (a new table's first run): no join to plan, and
    # the rows leaving the stage are the chain's (no second count of every row).
    after: Observation | None = None
    if context.spec.mode == "append" and chain.dedup_keys and context.base_rows != 0:
        good, after = _rows_after(_without_keys_in_table(context, good, chain.dedup_keys))

    assert batch.decode is not None, "transform needs the decode stage before it"
    on_error = table_on_error(context)
    audits = batch.audits
    rejected = batch.rejected
    if result is not None:
        if on_error == "fail":
            audits = (*audits, FailOnRejectedRows(result))
        else:
            rejected = (*rejected, RejectedRows(policy=on_error, rows=result.rejected_df))
    return batch.evolve(
        good=good,
        transforms=TransformCounting(batch.decode, result, after, on_error),
        audits=audits,
        rejected=rejected,
    )


def _without_keys_in_table(
    context: StageContext, good: DataFrame, keys: tuple[str, ...]
) -> DataFrame:
    """The batch less its rows whose dedup key the table holds: looked up in the table's
    key set (pipeline/dedup_index.py: the batch's keys only) when there is one, else the
    anti-join with the table's key column."""
    table, key_set = None, None
    if context.catalog is not None and context.base_snapshot_id is not None:
        spec = context.spec
        table = context.catalog.catalog.load_table((*spec.namespace, spec.table))
        key_set = key_set_at(table, context.base_snapshot_id, keys, timings=context.timings)
    if table is None or key_set is None:
        return _anti_join(context, good, keys)
    try:
        started = time.perf_counter()
        found = drop_rows_held(
            good,
            context.spark,
            keys,
            lambda rows: key_set.contains([rows.column(k) for k in keys]),
            context.cleanups,
        )
        context.timings["dedup_index_lookup"] = time.perf_counter() - started
        return found
    except KeyCollision:  # two keys of the batch share a hash: the exact way
        return _anti_join(context, good, keys)
    finally:
        keep_key_set(table, keys, key_set)


def _anti_join(context: StageContext, good: DataFrame, keys: tuple[str, ...]) -> DataFrame:
    # The table as the run's branch was cut (main's snapshot then): the same rows
    # whenever the frame is read, before the write or after it.
    return dedup_against_table(
        good, context.spark, context.spec.identifier, keys, snapshot_id=context.base_snapshot_id
    )


def _apply(context: StageContext, good: DataFrame, chain: CompiledTransforms) -> TransformResult:

    return apply_transforms(good, chain, spark=context.spark)
