"""Running compiled checks on a batch with great-expectations (Spark), before publishing.

great-expectations is imported here with its analytics switched off first: `plan`,
`--help` and tables without checks never pay its import (~4 s of CPU). `apply` and
`run` start it on a background thread (`prepare_great_expectations`, through
`checks.warmup`) as soon as they know a selected table has checks, so it overlaps the
JVM start; a check stage starts it otherwise (a no-op once started).

One validation judges every check of the table in one bundled aggregate. Each
row-level check compiles to a Spark SQL predicate selecting its failing rows
(`compile.py`, plus a window count for `unique`); the batch gets one 0/1 flag column
per check, and great-expectations validates that flag frame with one
`ExpectFlagColumnSumToBeZero` per check (`gx_flags.py`: the sum is the exact failing
count) and `ExpectTableRowCountToBeBetween` for `row_count`. Its Spark engine computes
all the sums and the row count as one `df.agg(...)`: one pass over the batch, whatever
the number of checks. The number of rows evaluated is that row count (an
`ExpectTableRowCountToBeBetween(min_value=0)` every validation carries reads it back), so
the batch is not counted apart. great-expectations' own `ExpectColumnSumToBeBetween`
depends on the row count, which cost a pass of its own before the sums (5 checks on 1M
written rows: a check stage of 2.03-2.15 s then, 1.89-1.97 s now). Mapping each check
straight onto a native expectation (ExpectColumnValuesToNotBeNull, ...ToBeUnique,
...ToBeInSet, ...ToBeBetween, UnexpectedRowsExpectation) cost one or more Spark jobs per
expectation (10 jobs for five checks); `tests/integration/test_checks_run.py` holds the predicates to
those native expectations' counts. A hash aggregate for `unique` (group by the key,
count above 1) and count vs count(distinct) were measured against the window and
dropped: both cost more CPU over 1M keys than the window's shuffle and sort; so were
lag/lead over hash buckets sorted by key and comparing neighbours in a Python task
(mapInArrow). The other flags cross the window's shuffle packed as bits of int columns
(`_flag_frame`).

Sample failing rows and the rows taken out for `on_failure: skip|dlq` are selected in
Spark with the same predicates, only when a check failed. The caller should persist
the input when it is expensive to compute (a batch read from Kafka): great-expectations
reads it once, and the rows taken out for skip/dlq are selected from it again.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tableflow_core.checks.compile import CompiledCheck, CompiledChecks
from tableflow_core.checks.report import Action, CheckReport, CheckResult, Outcome
from tableflow_core.config.extras import CHECKS, MissingExtraError
from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.ingest.columns import SOURCE_TIMESTAMP_COLUMN
from tableflow_core.ingest.upsert_order import OFFSET_COLUMN, PARTITION_COLUMN, TIMESTAMP_COLUMN
from tableflow_core.pipeline.transforms.spark import rejected_rows, row_json
from tableflow_core.sql_text import quote_ident

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

CHECK_STAGE = "check"
CHECK_ERROR_CLASS = "CheckFailed"
_REASON = "__tf_check_reason"
_DLQ = "dlq"
_SKIP = "skip"
# great-expectations keeps process-wide state (expectation registry, config providers)
# that is not documented as thread-safe; tables validating at once take turns (each
# validation is two short passes over a persisted batch).
_GX_LOCK = threading.Lock()
# The description of the row count expectation every validation carries (rows evaluated).
_ROWS = "tableflow: rows evaluated"


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


_GX_IMPORT: threading.Thread | None = None
_GX_IMPORT_LOCK = threading.Lock()


def _import_gx() -> None:
    """Import great-expectations with Python's cyclic collector paused, then freeze what
    the import allocated (`gc.freeze`). The import allocates ~330,000 objects: the
    collector's passes over them during the import were ~0.6 s of its ~3.4 s of CPU,
    and each full collection after it ~0.1-0.2 s (during the validation, or the
    table's write); frozen objects are never scanned again. The pause is process-wide,
    for the ~3 s of the import. The price: garbage cycles made in those seconds are
    frozen too and never freed (~5,000 objects, once per process)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        import great_expectations.expectations  # noqa: F401
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


def prepare_great_expectations() -> None:
    """Start importing great-expectations on a daemon thread (once per process), so the
    import overlaps the Spark work that comes before the validation. `_gx()` waits
    for it; an import that fails there fails again, with its error, in `_gx()`."""
    global _GX_IMPORT
    os.environ["GX_ANALYTICS_ENABLED"] = "false"
    with _GX_IMPORT_LOCK:
        if _GX_IMPORT is None:
            _GX_IMPORT = threading.Thread(
                target=_import_gx, name="tableflow-gx-import", daemon=True
            )
            _GX_IMPORT.start()


def _gx() -> Any:
    """great-expectations; MissingExtraError naming `tableflow[checks]` when it is absent."""
    os.environ["GX_ANALYTICS_ENABLED"] = "false"
    try:
        import great_expectations as gx
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] == CHECKS.module:
            raise MissingExtraError(CHECKS) from exc
        raise
    return gx


def _flag(index: int) -> str:
    return f"__tf_failing_{index}"


def _expectation(check: CompiledCheck, index: int) -> Any:
    """The expectation judging `check` over the flag frame (see the module docstring)."""
    import great_expectations.expectations as gxe

    from tableflow_core.pipeline.checks.gx_flags import ExpectFlagColumnSumToBeZero

    if check.kind == "row_count":
        return gxe.ExpectTableRowCountToBeBetween(
            min_value=_int_or_none(check.min), max_value=_int_or_none(check.max)
        )
    return ExpectFlagColumnSumToBeZero(column=_flag(index), description=check.name)


def _int_or_none(value: float | None) -> int | None:
    return int(value) if value is not None else None


@dataclass(frozen=True)
class _GxOutcome:
    success: bool
    failing: int | None
    observed: int | None
    error: str | None


# Flags packed per int column before the unique checks' windows (bit 31 stays clear).
_MASK_BITS = 31


def _flag_frame(
    df: DataFrame, checks: tuple[CompiledCheck, ...], proven: frozenset[int] = frozenset()
) -> DataFrame:
    """One 0/1 column per row-level check (1: the row fails it); a constant column when
    there is none (row_count alone), so great-expectations never gets a column-less frame.

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
    """great-expectations' verdict on each check, and the rows it counted in the batch."""

    outcomes: list[_GxOutcome]
    rows: int


def _validate(flags: DataFrame, checks: tuple[CompiledCheck, ...]) -> _Validation:
    """great-expectations' verdict on every check, from the flag frame of the batch.

    The batch's row count is great-expectations' own `table.row_count`, computed in the
    same aggregate as the flags' sums and read back through `_ROWS`, so the batch is never
    counted apart. An empty batch has no rows to fail: its flags sum to 0."""
    gx = _gx()
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = (
        # persist=False: by default great-expectations caches the frame it validates and
        # never releases it; its one pass would then also write the cache.
        context.data_sources.add_spark(name="tableflow", persist=False)
        .add_dataframe_asset(name="batch")
        .add_batch_definition_whole_dataframe("whole")
    )
    suite = context.suites.add(gx.ExpectationSuite(name="checks"))
    rows_id = suite.add_expectation(
        gxe.ExpectTableRowCountToBeBetween(min_value=0, description=_ROWS)
    ).id
    ids = {
        suite.add_expectation(_expectation(check, index)).id: index
        for index, check in enumerate(checks)
    }
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(name="tableflow", data=batch, suite=suite)
    )
    with _GX_LOCK:
        run = definition.run(
            batch_parameters={"dataframe": flags}, result_format={"result_format": "BASIC"}
        )
    outcomes: dict[int, _GxOutcome] = {}
    rows: _GxOutcome | None = None
    for result in run.results:
        if result.expectation_config.id == rows_id:
            rows = _outcome(result)
        else:
            outcomes[ids[result.expectation_config.id]] = _outcome(result)
    assert rows is not None, "great-expectations returned no row count"
    return _Validation([outcomes[index] for index in range(len(checks))], rows.observed or 0)


def _outcome(result: Any) -> _GxOutcome:
    info = result.exception_info or {}
    raised = info.get("raised_exception") if isinstance(info, dict) else False
    error = info.get("exception_message") if raised else None
    observed = (result.result or {}).get("observed_value")
    count = int(observed) if isinstance(observed, int) and not raised else None
    row_count = result.expectation_config.type == "expect_table_row_count_to_be_between"
    return _GxOutcome(
        success=bool(result.success) and not raised,
        failing=None if row_count else count,
        observed=count if row_count else None,
        error=str(error) if error else None,
    )


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
    great-expectations, rows whose keys are all NULL are not judged."""
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


def _samples(df: DataFrame, predicate: Column, size: int) -> tuple[dict[str, Any], ...]:
    visible = [c for c in df.columns if not c.startswith("__tf_") or c in _POSITION]
    positions = _positions(df)
    rows = (
        df.filter(predicate)
        .select(*[positions.get(c, _col(c)).alias(c) for c in visible])
        .limit(size)
        .collect()
    )
    return tuple(
        {_POSITION.get(k, k): v for k, v in row.asDict(recursive=True).items()} for row in rows
    )


_POSITION = {SOURCE_PARTITION_COLUMN: "kafka_partition", SOURCE_OFFSET_COLUMN: "kafka_offset"}


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


def _verdict(check: CompiledCheck, gx_result: _GxOutcome) -> tuple[Outcome, Action]:
    if gx_result.success:
        return "pass", "none"
    if check.severity == "warn":
        return "warn", "none"
    if gx_result.error is None and check.splits_rows:
        return "warn", "dead_lettered" if check.on_failure == "dlq" else "skipped"
    return "fail", "none"


_PROVEN = "no key repeats in the rows read (the read tasks' key digests): judged without a window"


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
    prepare_great_expectations()  # no-op if the check stage started it already
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
    results = []
    for index, (check, gx_result) in enumerate(zip(checks, validation.outcomes, strict=True)):
        outcome, action = _verdict(check, gx_result)
        samples: tuple[dict[str, Any], ...] = ()
        if outcome != "pass" and check.name in sampling:
            samples = _samples(sampled, sampling[check.name], sample_size)
        results.append(
            CheckResult.of(
                check,
                outcome,
                rows_evaluated=total,
                failing=None if check.kind == "row_count" else (gx_result.failing or 0),
                action=action,
                observed=gx_result.observed if check.kind == "row_count" else None,
                samples=samples,
                detail=_PROVEN if index in proven else _detail(check, gx_result),
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
            row=row_json([c for c in columns if not c.startswith("__tf_")]),
        )

    return (
        passing,
        taken_out(_DLQ),
        taken_out(_SKIP),
        int(counts.get(_DLQ, 0)),
        int(counts.get(_SKIP, 0)),
    )
