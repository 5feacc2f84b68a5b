"""Running compiled checks on a batch on Spark, before publishing.

Every check of the table is judged by one Spark aggregate. Each row-level check
compiles to a Spark SQL predicate selecting its failing rows (`compile.py`, plus a
window count for `unique`); the batch gets one 0/1 flag column per check, and one
`df.agg(count(1), sum(flag), ...)` gives the row count (`row_count`, and the rows
evaluated) and each check's exact failing count: one pass over the batch, whatever the
number of checks. `tests/integration/test_checks_run.py` holds those counts to
great-expectations' native expectations (ExpectColumnValuesToNotBeNull, ...ToBeUnique,
...ToBeInSet, ...ToBeBetween, UnexpectedRowsExpectation, ExpectTableRowCountToBeBetween),
the independent model of what each check means. great-expectations ran this aggregate
until round 4 (through an expectation of ours over the flag columns): it added ~155 MB
to the driver of every process that ran checks, ~3 s of CPU to import and ~0.03 s of
driver CPU per validation, and decided nothing the sums do not (docs/architecture.md,
"Decisions"). A hash aggregate for `unique` (group by the key, count above 1) and count vs
count(distinct) were measured against the window and dropped: both cost more CPU over
1M keys than the window's shuffle and sort; so were lag/lead over hash buckets sorted
by key and comparing neighbours in a Python task (mapInArrow). The other flags cross the
window's shuffle packed as bits of int columns (`_flag_frame`).

The same aggregate counts the rows `on_failure: skip|dlq` checks would take out (dlq
first), so splitting the batch costs no count of its own. Sample failing rows and the
rows taken out are selected in Spark with the same predicates, only when a check failed:
every failing check's samples in one more pass when they fail on at most
SAMPLE_ALL_FAILING_MAX rows together (a job per check otherwise). With failing checks
the input is read twice (`tests/integration/test_checks_run.py`; four times before), so
the caller should persist it when it is expensive to compute (a batch read from Kafka);
the rows taken out for skip/dlq are selected from it again when they are routed.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tableflow_core.checks.compile import CompiledCheck, CompiledChecks
from tableflow_core.checks.report import SAMPLES_PER_CHECK, CheckReport, CheckResult
from tableflow_core.checks.verdict import (
    CHECK_ERROR_CLASS,
    CHECK_STAGE,
    Judged,
    check_results,
    judge,
    verdict,
)
from tableflow_core.deadletter.frames import spark_error_summary
from tableflow_core.ingest.bad_records import (
    SAMPLE_POSITIONS,
    SOURCE_OFFSET_COLUMN,
    SOURCE_PARTITION_COLUMN,
)
from tableflow_core.ingest.columns import SOURCE_TIMESTAMP_COLUMN
from tableflow_core.ingest.upsert_order import OFFSET_COLUMN, PARTITION_COLUMN, TIMESTAMP_COLUMN
from tableflow_core.pipeline.transforms.spark import rejected_rows, row_json
from tableflow_core.sql_text import quote_ident

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_REASON = "__tf_check_reason"
_DLQ = "dlq"
_SKIP = "skip"


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


def _flag(index: int) -> str:
    return f"__tf_failing_{index}"


# Flags packed per int column before the unique checks' windows (bit 31 stays clear).
_MASK_BITS = 31


def _flag_frame(
    df: DataFrame, checks: tuple[CompiledCheck, ...], proven: frozenset[int] = frozenset()
) -> DataFrame:
    """One 0/1 column per row-level check (1: the row fails it); a constant column when
    there is none (row_count alone), so the aggregate always has a frame with a column.

    A `unique` check needs a window (a shuffle and a sort of the batch). The other flags
    are computed before it and packed as bits into int columns, so the shuffle and the
    sort carry the unique keys and one int per 31 flags instead of every column the
    checks read, and are unpacked after it (1M rows, five checks: ~0.3 s less CPU). The
    frame is built from SQL text (three calls into the JVM, not one per expression).
    `proven`: indexes of `unique` checks the read tasks proved (their flag is 0, no window).
    """
    predicates = _row_predicates(checks, proven)
    windows = _unique_windows(checks, proven)
    flags: dict[int, str] = {}
    if not windows:
        flags = {i: _zero_one(p) for i, p in predicates.items()}
        frame = df
    else:
        packed = list(predicates.items())
        masks = []
        for start in range(0, len(packed), _MASK_BITS):
            bits = [
                f"CASE WHEN {predicate} THEN {1 << bit} ELSE 0 END"
                for bit, (_, predicate) in enumerate(packed[start : start + _MASK_BITS])
            ]
            masks.append(f"{' | '.join(bits)} AS {quote_ident(_mask(start // _MASK_BITS))}")
        keys = sorted({c for check in checks if check.kind == "unique" for c in check.columns})
        frame = df.selectExpr(*[quote_ident(k) for k in keys], *masks).selectExpr("*", *windows)
        for position, (index, _) in enumerate(packed):
            mask = quote_ident(_mask(position // _MASK_BITS))
            flags[index] = f"shiftright({mask}, {position % _MASK_BITS}) & 1"
        flags.update({i: _zero_one(p) for i, p in _unique_predicates(checks, proven).items()})
    columns = [f"{flags[index]} AS {quote_ident(_flag(index))}" for index in sorted(flags)]
    return frame.selectExpr(*(columns or ["1 AS __tf_row"]))


def _mask(number: int) -> str:
    return f"__tf_mask_{number}"


def _zero_one(predicate: str) -> str:
    return f"CASE WHEN {predicate} THEN 1 ELSE 0 END"


@dataclass(frozen=True)
class _Validation:
    """The verdict on each check, the rows counted in the batch, and the rows its failing
    skip/dlq checks take out by policy (None: not counted, when the aggregate raised)."""

    outcomes: list[Judged]
    rows: int
    taken_out: dict[str, int] | None = None


def _validate(flags: DataFrame, checks: tuple[CompiledCheck, ...]) -> _Validation:
    """The verdict on every check, from the flag frame of the batch: the row count and
    every flag's sum (its exact failing count) in one Spark aggregate, one pass over the
    batch whatever the number of checks. An empty batch has no rows to fail: its flags
    sum to 0. When the aggregate fails (an expression that raises on some row), each
    figure is computed alone, so the error is the failing check's own."""
    sums = {index: _flag(index) for index, c in enumerate(checks) if c.kind != "row_count"}
    taken_out = _taken_out_sums(checks)
    try:
        # SQL text: one call into the JVM, not one per column expression.
        row = flags.selectExpr(
            "count(1)", *map(_sum, sums.values()), *taken_out.values()
        ).collect()[0]
    except _spark_errors() as error:
        return _validate_one_by_one(flags, checks, sums, error)
    figures = {index: int(row[position + 1] or 0) for position, index in enumerate(sums)}
    rows = int(row[0])
    counted = {
        policy: int(row[1 + len(sums) + position] or 0) for position, policy in enumerate(taken_out)
    }
    judged = [judge(c, figures.get(i), rows) for i, c in enumerate(checks)]
    return _Validation(judged, rows, counted)


def _taken_out_sums(checks: tuple[CompiledCheck, ...]) -> dict[str, str]:
    """The rows each policy would take out, as aggregates over the flag frame, counted in
    the validation's pass instead of a job of their own: the rows failing a `dlq` check,
    and those failing a `skip` check and no `dlq` one (dead-lettering wins). A check
    that passes fails no row, so these are the counts of `_split` whichever checks fail."""
    flags = {
        policy: [_flag(i) for i, c in enumerate(checks) if c.splits_rows and c.on_failure == policy]
        for policy in (_DLQ, _SKIP)
    }

    def any_of(names: list[str]) -> str:
        return " OR ".join(f"{quote_ident(name)} = 1" for name in names) or "false"

    return {
        _DLQ: f"count(CASE WHEN {any_of(flags[_DLQ])} THEN 1 END)",
        _SKIP: f"count(CASE WHEN ({any_of(flags[_SKIP])}) AND NOT ({any_of(flags[_DLQ])}) THEN 1 END)",
    }


def _validate_one_by_one(
    flags: DataFrame, checks: tuple[CompiledCheck, ...], sums: dict[int, str], error: Exception
) -> _Validation:
    """`_validate` after its aggregate raised `error`: the row count alone (a batch that
    cannot be counted is the run's error, not a check's), then each flag's sum alone."""
    try:
        rows = flags.count()
    except _spark_errors():
        raise error from None
    judged = []
    for index, check in enumerate(checks):
        if index not in sums:
            judged.append(judge(check, None, rows))
            continue
        try:
            failing = int(flags.selectExpr(_sum(sums[index])).collect()[0][0] or 0)
        except _spark_errors() as failed:
            judged.append(Judged(False, None, None, spark_error_summary(failed)))
            continue
        judged.append(judge(check, failing, rows))
    return _Validation(judged, rows)


def _sum(flag: str) -> str:
    return f"sum({quote_ident(flag)})"


def _spark_errors() -> tuple[type[Exception], ...]:
    """What a Spark action raises when the data makes an expression fail."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JJavaError)


def _col(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col(quote_ident(name))


def _row_predicates(
    checks: tuple[CompiledCheck, ...], proven: frozenset[int] = frozenset()
) -> dict[int, str]:
    """The failing predicate (SQL) of each row-level check that needs no window, by index:
    `unique` checks in `proven` (no key repeats: `pipeline/checks/read_task_unique.py`) fail no row."""
    predicates = {
        index: f"coalesce(({check.failing_rows}), false)"
        for index, check in enumerate(checks)
        if check.kind != "unique" and check.failing_rows is not None
    }
    return {**predicates, **dict.fromkeys(sorted(proven), "false")}


def _unique_column(index: int) -> str:
    return f"__tf_unique_{index}"


def _unique_windows(
    checks: tuple[CompiledCheck, ...], proven: frozenset[int] = frozenset()
) -> list[str]:
    """Each unique check's count of rows per key (a window), as SQL select items."""
    return [
        f"count(1) OVER (PARTITION BY {', '.join(quote_ident(c) for c in check.columns)}) "
        f"AS {quote_ident(_unique_column(index))}"
        for index, check in enumerate(checks)
        if check.kind == "unique" and index not in proven
    ]


def _unique_predicates(
    checks: tuple[CompiledCheck, ...], proven: frozenset[int] = frozenset()
) -> dict[int, str]:
    """Each unique check's failing predicate (SQL) over its window count, by index. Like
    great-expectations' ExpectCompoundColumnsToBeUnique, rows whose keys are all NULL are
    not judged."""
    return {
        index: f"({' OR '.join(f'{quote_ident(c)} IS NOT NULL' for c in check.columns)}) "
        f"AND {quote_ident(_unique_column(index))} > 1"
        for index, check in enumerate(checks)
        if check.kind == "unique" and index not in proven
    }


def _with_failing_flags(
    df: DataFrame, checks: tuple[CompiledCheck, ...], proven: frozenset[int] = frozenset()
) -> tuple[DataFrame, dict[str, Column]]:
    """`df` plus what unique checks need, and each row-level check's failing predicate.
    Only built when a check failed (samples, rows taken out)."""
    from pyspark.sql import functions as F

    windows = _unique_windows(checks, proven)
    flagged = df.selectExpr("*", *windows) if windows else df
    predicates = {**_row_predicates(checks, proven), **_unique_predicates(checks, proven)}
    return flagged, {checks[i].name: F.expr(sql) for i, sql in predicates.items()}


# Failing rows (over the checks sampled) up to which every one of them is collected in
# one job and each check's samples are taken on the driver; above, a job per check
# selects its first rows (`limit`, which Spark may run as several jobs).
SAMPLE_ALL_FAILING_MAX = 1_000
_SAMPLE_OF = "__tf_sample_of_{}"


def _samples(
    df: DataFrame, predicates: Mapping[str, Column], failing: int, size: int
) -> dict[str, tuple[dict[str, Any], ...]]:
    """Up to `size` failing rows of each check in `predicates` (by name), visible columns
    and the Kafka position. `failing`: those checks' failing rows added up, from the
    validation."""
    if not predicates:  # nothing failed: no column is built, nothing is read
        return {}
    visible = [c for c in df.columns if not c.startswith("__tf_") or c in SAMPLE_POSITIONS]
    positions = _positions(df)
    columns = [positions.get(c, _col(c)).alias(c) for c in visible]
    if failing > SAMPLE_ALL_FAILING_MAX:
        return {
            name: _as_samples(df.filter(predicate).select(*columns).limit(size).collect())
            for name, predicate in predicates.items()
        }
    names = list(predicates)
    marks = [
        predicates[name].alias(_SAMPLE_OF.format(position)) for position, name in enumerate(names)
    ]
    any_failing = functools.reduce(lambda a, b: a | b, predicates.values())
    rows = df.filter(any_failing).select(*marks, *columns).collect()
    return {
        name: _as_samples([r for r in rows if r[position]][:size])
        for position, name in enumerate(names)
    }


def _as_samples(rows: list[Any]) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            SAMPLE_POSITIONS.get(k, k): v
            for k, v in row.asDict(recursive=True).items()
            if not k.startswith("__tf_sample_of_")
        }
        for row in rows
    )


def _positions(df: DataFrame) -> dict[str, Column]:
    """The `_kafka_offset`/`_kafka_partition`/`_kafka_timestamp` metadata columns, filled
    from the record's source position where the batch leaves them null (an upsert batch:
    the write fills them from the same hidden columns), so a sample shows them."""
    from pyspark.sql import functions as F

    sources = {
        OFFSET_COLUMN: (SOURCE_OFFSET_COLUMN, F.col(SOURCE_OFFSET_COLUMN).cast("long")),
        PARTITION_COLUMN: (SOURCE_PARTITION_COLUMN, F.col(SOURCE_PARTITION_COLUMN).cast("int")),
        TIMESTAMP_COLUMN: (
            SOURCE_TIMESTAMP_COLUMN,
            F.expr(f"timestamp_millis({quote_ident(SOURCE_TIMESTAMP_COLUMN)})"),
        ),
    }
    return {
        name: F.coalesce(_col(name), source)
        for name, (hidden, source) in sources.items()
        if name in df.columns and hidden in df.columns
    }


_PROVEN = "no key repeats in the rows read (the read tasks' key digests): judged without a window"


def run_checks(
    df: DataFrame,
    compiled: CompiledChecks,
    spark: SparkSession,
    *,
    table: str,
    sample_size: int = SAMPLES_PER_CHECK,
    distinct_keys: Collection[tuple[str, ...]] = (),
    samples_from: DataFrame | None = None,
) -> CheckRun:
    """Validate `df` (the transformed batch, hidden columns included) against `compiled`.
    `distinct_keys`: keys no two rows of `df` share, as the read tasks proved them
    (`pipeline/checks/read_task_unique.py`): a `unique` check on one of them needs no window.
    `samples_from`: the same rows with their hidden source positions, when `df` lacks them
    (the rows an append wrote, read back): failing checks' samples come from there (read
    again only when a check failed), so they name their partition and offset."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    checks = compiled.checks
    if not checks:
        empty = rejected_rows(
            df.limit(0), stage=CHECK_STAGE, error_class=F.lit(""), error_message=F.lit("")
        )
        report = CheckReport(table=table, results=(), rows_evaluated=0)
        return CheckRun(report, df, empty, 0, 0, empty)
    proven = frozenset(
        i for i, c in enumerate(checks) if c.kind == "unique" and c.columns in distinct_keys
    )
    validation = _validate(_flag_frame(df, checks, proven), checks)
    total = validation.rows
    failed = any(not outcome.success for outcome in validation.outcomes)
    flagged, predicates = _with_failing_flags(df, checks, proven) if failed else (df, {})
    sampled, sampling = flagged, predicates
    if failed and samples_from is not None:
        sampled, sampling = _with_failing_flags(samples_from, checks, proven)
    verdicts = [verdict(c, j) for c, j in zip(checks, validation.outcomes, strict=True)]
    to_sample = [
        (check.name, judged.failing or 0)
        for check, judged, (outcome, _) in zip(checks, validation.outcomes, verdicts, strict=True)
        if outcome != "pass" and judged.error is None and check.name in sampling
    ]
    samples_of = _samples(
        sampled,
        {name: sampling[name] for name, _ in to_sample},
        sum(failing for _, failing in to_sample),
        sample_size,
    )
    results = check_results(
        checks,
        validation.outcomes,
        total,
        samples_of,
        details=dict.fromkeys(proven, _PROVEN),
    )
    splitting = [
        (check, result)
        for check, result in zip(checks, results, strict=True)
        if result.action != "none"
    ]
    passing, rejected, skipped, rejected_count, skipped_count = _split(
        flagged, df.columns, splitting, predicates, validation.taken_out
    )
    report = CheckReport(
        table=table,
        results=results,
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
    counted: Mapping[str, int] | None = None,
) -> tuple[DataFrame, DataFrame, DataFrame, int, int]:
    """Take failing rows of skip/dlq checks out; dead-lettering wins over skipping.
    `counted`: the rows each policy takes out, as the validation counted them (None:
    counted here, a job of its own).

    Returns (passing, dead-lettered, skipped, dead-lettered count, skipped count)."""
    from pyspark.sql import functions as F

    if not splitting:
        empty = rejected_rows(
            flagged.limit(0), stage=CHECK_STAGE, error_class=F.lit(""), error_message=F.lit("")
        )
        unchanged = flagged if flagged.columns == columns else flagged.select(*map(_col, columns))
        return unchanged, empty, empty, 0, 0
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
    counts = (
        dict(counted)
        if counted is not None
        else {
            row[0]: row[1]
            for row in tagged.groupBy(F.split(_col(_REASON), ":").getItem(0)).count().collect()
        }
    )
    passing = tagged.filter(_col(_REASON).isNull()).select(*[_col(c) for c in columns])

    def taken_out(policy: str) -> DataFrame:
        return rejected_rows(
            tagged.filter(F.split(_col(_REASON), ":").getItem(0) == F.lit(policy)),
            stage=CHECK_STAGE,
            error_class=F.lit(CHECK_ERROR_CLASS),
            error_message=F.concat(
                F.lit("check "), F.substring_index(_col(_REASON), ":", -1), F.lit(" failed")
            ),
            row=row_json([c for c in columns if not c.startswith("__tf_")]),
        )

    return (
        passing,
        taken_out(_DLQ),
        taken_out(_SKIP),
        int(counts.get(_DLQ, 0)),
        int(counts.get(_SKIP, 0)),
    )
