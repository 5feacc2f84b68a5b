"""Running compiled checks on a batch with great-expectations (Spark), before publishing.

great-expectations is imported here, inside `run_checks`, with its analytics switched
off first: `plan`, `--help` and tables without checks never pay its ~4 s import, and it
never calls home. One ephemeral GX context, one Spark dataframe asset and one
validation definition carry every check of the table; GX decides each outcome and the
failing counts. Every check maps onto a GX expectation:

| check | expectation |
|---|---|
| not_null | ExpectColumnValuesToNotBeNull (one per column) |
| unique | ExpectColumnValuesToBeUnique / ExpectCompoundColumnsToBeUnique |
| accepted_values | ExpectColumnValuesToBeInSet |
| range | ExpectColumnValuesToBeBetween |
| expression | UnexpectedRowsExpectation (`SELECT * FROM {batch} WHERE NOT coalesce(expr, false)`) |
| row_count | ExpectTableRowCountToBeBetween |

Sample failing rows and the rows taken out for `on_failure: skip|dlq` are selected in
Spark with each check's failing-rows predicate (GX reports values, not rows); the
tests hold both to the same counts. The caller should persist the input first: GX runs
several Spark jobs over it, and `run_checks` counts it before anything else (which also
completes the transform stage's counting observation).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tableflow_core.checks.compile import CompiledCheck, CompiledChecks
from tableflow_core.checks.report import Action, CheckReport, CheckResult, Outcome
from tableflow_core.pipeline.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.transforms.spark import rejected_rows

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

CHECK_STAGE = "check"
CHECK_ERROR_CLASS = "CheckFailed"
_REASON = "__tf_check_reason"
_DLQ = "dlq"
_SKIP = "skip"
# great-expectations evaluates UnexpectedRowsExpectation on Spark through one
# session-wide temp view named "tmp_view": two tables validating at once in the same
# SparkSession would read each other's batch. Validations take turns.
_GX_LOCK = threading.Lock()


@dataclass(frozen=True)
class CheckRun:
    """The report, the rows to publish, the rows for the dead-letter target and the rows
    skipped (both REJECTED_ROW_SCHEMA: the run's accounting counts them per partition)."""

    report: CheckReport
    passing_df: DataFrame
    rejected_df: DataFrame
    rejected_count: int
    skipped_count: int
    skipped_df: DataFrame | None = None


def _gx() -> Any:
    os.environ["GX_ANALYTICS_ENABLED"] = "false"
    import great_expectations as gx

    return gx


def _expectation(check: CompiledCheck) -> Any:
    import great_expectations.expectations as gxe

    builders: dict[str, Callable[[CompiledCheck], Any]] = {
        "not_null": lambda c: gxe.ExpectColumnValuesToNotBeNull(column=c.columns[0]),
        "unique": lambda c: (
            gxe.ExpectColumnValuesToBeUnique(column=c.columns[0])
            if len(c.columns) == 1
            else gxe.ExpectCompoundColumnsToBeUnique(column_list=list(c.columns))
        ),
        "accepted_values": lambda c: gxe.ExpectColumnValuesToBeInSet(
            column=c.columns[0], value_set=list(c.values)
        ),
        "range": lambda c: gxe.ExpectColumnValuesToBeBetween(
            column=c.columns[0], min_value=c.min, max_value=c.max
        ),
        "expression": lambda c: gxe.UnexpectedRowsExpectation(
            unexpected_rows_query=f"SELECT * FROM {{batch}} WHERE {c.failing_rows}",
            description=c.name,
        ),
        "row_count": lambda c: gxe.ExpectTableRowCountToBeBetween(
            min_value=_int_or_none(c.min), max_value=_int_or_none(c.max)
        ),
    }
    return builders[check.kind](check)


def _int_or_none(value: float | None) -> int | None:
    return int(value) if value is not None else None


@dataclass(frozen=True)
class _GxOutcome:
    success: bool
    rows_evaluated: int | None
    failing: int | None
    observed: int | None
    error: str | None


def _validate(df: DataFrame, checks: tuple[CompiledCheck, ...]) -> list[_GxOutcome]:
    gx = _gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = (
        context.data_sources.add_spark(name="tableflow")
        .add_dataframe_asset(name="batch")
        .add_batch_definition_whole_dataframe("whole")
    )
    suite = context.suites.add(gx.ExpectationSuite(name="checks"))
    ids = [suite.add_expectation(_expectation(check)).id for check in checks]
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(name="tableflow", data=batch, suite=suite)
    )
    with _GX_LOCK:
        run = definition.run(
            batch_parameters={"dataframe": df},
            result_format={"result_format": "BASIC", "partial_unexpected_count": 0},
        )
    by_id = {r.expectation_config.id: r for r in run.results}
    return [_outcome(by_id[i]) for i in ids]


def _outcome(result: Any) -> _GxOutcome:
    info = result.exception_info or {}
    raised = info.get("raised_exception") if isinstance(info, dict) else False
    error = info.get("exception_message") if raised else None
    values = result.result or {}
    observed = values.get("observed_value")
    unexpected = values.get("unexpected_count")
    kind = result.expectation_config.type
    if kind == "unexpected_rows_expectation":
        unexpected, observed = observed, None
    return _GxOutcome(
        success=bool(result.success) and not raised,
        rows_evaluated=values.get("element_count"),
        failing=int(unexpected) if unexpected is not None else None,
        observed=int(observed) if isinstance(observed, int) else None,
        error=str(error) if error else None,
    )


def _col(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col(f"`{name}`")


def _with_failing_flags(
    df: DataFrame, checks: tuple[CompiledCheck, ...]
) -> tuple[DataFrame, dict[str, Column]]:
    """`df` plus what unique checks need, and each row-level check's failing predicate."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    predicates: dict[str, Column] = {}
    for index, check in enumerate(checks):
        if check.kind == "unique":
            column = f"__tf_unique_{index}"
            keys = [_col(c) for c in check.columns]
            df = df.withColumn(column, F.count(F.lit(1)).over(Window.partitionBy(*keys)))
            # Like great-expectations: rows whose keys are all NULL are not judged.
            judged = F.lit(False)
            for key in keys:
                judged = judged | key.isNotNull()
            predicates[check.name] = judged & (_col(column) > 1)
        elif check.failing_rows is not None:
            predicates[check.name] = F.coalesce(F.expr(check.failing_rows), F.lit(False))
    return df, predicates


def _samples(df: DataFrame, predicate: Column, size: int) -> tuple[dict[str, Any], ...]:
    visible = [c for c in df.columns if not c.startswith("__tf_") or c in _POSITION]
    rows = df.filter(predicate).select(*[_col(c) for c in visible]).limit(size).collect()
    return tuple(
        {_POSITION.get(k, k): v for k, v in row.asDict(recursive=True).items()} for row in rows
    )


_POSITION = {SOURCE_PARTITION_COLUMN: "kafka_partition", SOURCE_OFFSET_COLUMN: "kafka_offset"}


def _verdict(check: CompiledCheck, gx_result: _GxOutcome) -> tuple[Outcome, Action]:
    if gx_result.success:
        return "pass", "none"
    if check.severity == "warn":
        return "warn", "none"
    if gx_result.error is None and check.splits_rows:
        return "warn", "dead_lettered" if check.on_failure == "dlq" else "skipped"
    return "fail", "none"


def _detail(check: CompiledCheck, gx_result: _GxOutcome) -> str | None:
    if gx_result.error:
        return f"the check could not run: {gx_result.error}"
    if check.kind == "row_count":
        bounds = [
            f"at least {check.min:g}" if check.min is not None else "",
            f"at most {check.max:g}" if check.max is not None else "",
        ]
        return "expected " + " and ".join(b for b in bounds if b)
    return None


def run_checks(
    df: DataFrame,
    compiled: CompiledChecks,
    spark: SparkSession,
    *,
    table: str,
    sample_size: int = 3,
) -> CheckRun:
    """Validate `df` (the transformed batch, hidden columns included) against `compiled`."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    checks = compiled.checks
    if not checks:
        empty = rejected_rows(
            df.limit(0), stage=CHECK_STAGE, error_class=F.lit(""), error_message=F.lit("")
        )
        report = CheckReport(table=table, results=(), rows_evaluated=0)
        return CheckRun(report, df, empty, 0, 0, empty)
    total = df.count()
    outcomes = _validate(df, checks)
    flagged, predicates = _with_failing_flags(df, checks)
    results = []
    for check, gx_result in zip(checks, outcomes, strict=True):
        outcome, action = _verdict(check, gx_result)
        samples: tuple[dict[str, Any], ...] = ()
        if outcome != "pass" and check.name in predicates:
            samples = _samples(flagged, predicates[check.name], sample_size)
        results.append(
            CheckResult(
                name=check.name,
                kind=check.kind,
                key=check.key,
                severity=check.severity,
                on_failure=check.on_failure,
                rows_evaluated=gx_result.rows_evaluated
                if gx_result.rows_evaluated is not None
                else total,
                failing=None if check.kind == "row_count" else (gx_result.failing or 0),
                outcome=outcome,
                action=action,
                observed=gx_result.observed if check.kind == "row_count" else None,
                samples=samples,
                detail=_detail(check, gx_result),
            )
        )
    splitting = [
        (check, result)
        for check, result in zip(checks, results, strict=True)
        if result.action != "none"
    ]
    passing, rejected, skipped, rejected_count, skipped_count = _split(
        flagged, df.columns, splitting, predicates
    )
    report = CheckReport(
        table=table,
        results=tuple(results),
        rows_evaluated=total,
        rows_skipped=skipped_count,
        rows_dead_lettered=rejected_count,
        duration_s=time.monotonic() - started,
    )
    return CheckRun(report, passing, rejected, rejected_count, skipped_count, skipped)


def _split(
    flagged: DataFrame,
    columns: list[str],
    splitting: list[tuple[CompiledCheck, CheckResult]],
    predicates: dict[str, Column],
) -> tuple[DataFrame, DataFrame, DataFrame, int, int]:
    """Take failing rows of skip/dlq checks out; dead-lettering wins over skipping.

    Returns (passing, dead-lettered, skipped, dead-lettered count, skipped count)."""
    from pyspark.sql import functions as F

    if not splitting:
        empty = rejected_rows(
            flagged.limit(0), stage=CHECK_STAGE, error_class=F.lit(""), error_message=F.lit("")
        )
        return flagged.select(*[_col(c) for c in columns]), empty, empty, 0, 0
    ordered = sorted(splitting, key=lambda item: item[0].on_failure != "dlq")
    reason: Column | None = None
    for check, _ in ordered:
        label = F.lit(f"{check.on_failure}:{check.name}")
        reason = (
            F.when(predicates[check.name], label)
            if reason is None
            else reason.when(predicates[check.name], label)
        )
    assert reason is not None
    tagged = flagged.withColumn(_REASON, reason)
    counts = {
        row[0]: row[1]
        for row in tagged.groupBy(F.split(_col(_REASON), ":").getItem(0)).count().collect()
    }
    passing = tagged.filter(_col(_REASON).isNull()).select(*[_col(c) for c in columns])

    def taken_out(policy: str) -> DataFrame:
        return rejected_rows(
            tagged.filter(F.split(_col(_REASON), ":").getItem(0) == F.lit(policy)),
            stage=CHECK_STAGE,
            error_class=F.lit(CHECK_ERROR_CLASS),
            error_message=F.concat(
                F.lit("check "), F.substring_index(_col(_REASON), ":", -1), F.lit(" failed")
            ),
        )

    return (
        passing,
        taken_out(_DLQ),
        taken_out(_SKIP),
        int(counts.get(_DLQ, 0)),
        int(counts.get(_SKIP, 0)),
    )
