"""One exactly-once run of a table's pipeline: Kafka ranges -> Spark tasks -> one publish.

How a run commits (see docs/exactly-once.md):
1. read the table's committed offsets at the current snapshot S of `main` and
   refuse to run unless they equal `expected_start`;
2. one catalog commit (pyiceberg): a private branch `tableflow_run_<id>` at S (a table
   without snapshots first gets an empty one), stale run branches removed;
3. run the table's stages (ingest/stages.py): Spark tasks read their offset ranges
   (mapInArrow), decode, and the write stage writes the branch;
4. publish: audits on the branch, then one catalog commit: a snapshot carrying the
   offsets and the accounting on the branch, main moved to it, the branch removed. The
   catalog accepts it only while main is still at S (assert-ref-snapshot-id), so this
   check-and-set is atomic (engine/run_branch.py).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from tableflow_core.checks.report import empty_batch_report
from tableflow_core.deadletter.frames import spark_error_summary
from tableflow_core.engine.run_branch import (
    BRANCH_PREFIX,
    committed_at_ms,
    drop_branches,
    publish_run,
    rows_at,
    stale_branches,
    start_run,
)
from tableflow_core.errors import (
    ConcurrentCommitError,
    FailedRecord,
    IngestError,
    KeysAcrossReadTasks,
    MainMovedError,
)
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.pipeline.batch import Batch, StageContext
from tableflow_core.pipeline.registry import run_stages
from tableflow_core.pipeline.runners.check import ChecksFailed
from tableflow_core.pipeline.transforms.read_task_dedup import (
    KEYS_ACROSS_TASKS_PROPERTY,
    allowed_by_last_run,
)
from tableflow_core.state.offsets import (
    LOST_OFFSETS_KEY,
    OFFSETS_KEY,
    encode_lost_offsets,
    encode_offsets,
)
from tableflow_core.state.table_state import TableState, table_state_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "BRANCH_PREFIX",
    "ConcurrentCommitError",
    "FailedRecord",
    "IngestError",
    "IngestOutcome",
    "MainMovedError",
    "ingest",
]


@dataclass(frozen=True)
class IngestOutcome:
    records_read: int
    records_written: int
    failures: int
    offsets_before: dict[int, int]
    offsets_after: dict[int, int]
    snapshot_id: int | None
    duration_s: float
    warnings: tuple[str, ...] = field(default=())
    committed_at_ms: int | None = None  # `snapshot_id`'s commit time, when this run made it
    tombstones: int = 0
    accounting: dict[str, Any] | None = None  # RunAccounting.to_json(), when routed
    rows_skipped: int = 0  # taken out by transforms (on_error skip) and skip checks
    transforms: dict[str, int] | None = None  # transforms' counts (run_results.json)
    checks: dict[str, Any] | None = None  # CheckReport.as_dict() (run_results.json)
    timings: dict[str, float] | None = None  # wall seconds per phase (StageContext.timings)
    # Offsets gone from the topic that this run accepted to skip (on_data_loss: accept):
    # {partition: (start, end)}; also in the commit's `tableflow.lost-offsets`.
    lost: dict[int, tuple[int, int]] = field(default_factory=dict)


DecoderFactory = Callable[[Any], Any]


# The last line of a Python traceback inside a Spark error: "pkg.module.SomeError: message".
_PYTHON_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$")


def root_cause(error: BaseException, limit: int = 500) -> str:
    """The most telling line of a Spark job failure.

    Spark wraps a task's Python exception in a JVM stack trace whose first line is often
    empty or generic; the executor's own error (e.g. `KafkaReadError: topic 'x'
    partition 0 range [0, 20): ...`) is the line users need.
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    error_lines = [line for line in lines if _PYTHON_ERROR_LINE.match(line)]
    ours = [line for line in error_lines if line.startswith("tableflow_core.")]
    if ours:
        return _short_class(ours[-1])[:limit]
    if error_lines:
        return error_lines[0][:limit]
    return (lines[0] if lines else type(error).__name__)[:limit]


def failure_cause(error: BaseException) -> str:
    """Our executor's error when a task raised one, else the JVM's root cause (e.g.
    `HttpHostConnectException: ... Connection refused`), never py4j's "An error occurred
    while calling o107.append"."""

    lines = [line.strip() for line in str(error).splitlines()]
    if any(_PYTHON_ERROR_LINE.match(line) and line.startswith("tableflow_core.") for line in lines):
        return root_cause(error)
    return spark_error_summary(error)


def _catalog_named(spec: IngestSpec, handle: Any) -> str:
    address = getattr(handle, "address", None)
    name = repr(spec.catalog)
    return f"catalog {name} at {address}" if address else f"catalog {name}"


def _short_class(line: str) -> str:
    """'tableflow_core.kafka.range_reader.KafkaReadError: msg' -> 'KafkaReadError: msg'."""
    qualified, _, message = line.partition(": ")
    return f"{qualified.rsplit('.', 1)[-1]}: {message}"


def _committed_dict(state: TableState, topic: str) -> dict[int, int]:
    committed = state.committed_offsets(topic)
    return dict(committed.offsets) if committed is not None else {}


def _check_expected(
    state: TableState, spec: IngestSpec, expected: Mapping[int, int]
) -> dict[int, int]:
    committed = _committed_dict(state, spec.topic)
    if committed != dict(expected):
        raise ConcurrentCommitError(
            f"table {spec.table_name} ({spec.identifier}): committed offsets changed since the "
            f"plan (planned from {dict(expected)}, table now has {committed}); another run "
            "committed in between. Nothing was written; plan again."
        )
    return committed


def _load(spec: IngestSpec, catalog: Any) -> tuple[Any, TableState]:
    """The table (pyiceberg) and its state as the catalog holds it now: one request."""
    pyiceberg_catalog = getattr(catalog, "catalog", None)
    if pyiceberg_catalog is None:
        raise TypeError("ingest needs the target's catalog handle (its pyiceberg catalog)")
    table = pyiceberg_catalog.load_table((*spec.namespace, spec.table))
    return table, table_state_of(table.metadata)


def ingest(
    spark: SparkSession,
    spec: IngestSpec,
    ranges: Sequence[OffsetRange],
    kafka_conf: Mapping[str, str],
    expected_start: Mapping[int, int],
    *,
    start_offsets: Mapping[int, int] | None = None,
    decoder_factory: DecoderFactory | None = None,
    warnings: Sequence[str] = (),
    lost: Mapping[int, tuple[int, int]] | None = None,
    max_commit_attempts: int = 3,
    catalog: Any,
) -> IngestOutcome:
    """Read `ranges`, append them to the table and commit their offsets atomically.

    `expected_start`: the table's committed offsets the plan was made from ({} for a
    table that never committed). `start_offsets`: where each partition of the plan
    starts (defaults to the range starts); recorded for partitions without ranges so
    a later run never re-applies `start_from` to them. `catalog`: the target's catalog
    handle (`targets.catalog.CatalogHandle`): the run's branch, its publish and every
    state read go through its pyiceberg catalog. `lost`: offsets gone from the topic
    that the run accepts to skip, recorded with the commit (`tableflow.lost-offsets`).

    Commit conflicts are retried: when `main` moved during the write but its committed
    offsets did not (a compaction, a manual commit), the run writes again from the new
    `main`, up to `max_commit_attempts` times. When another run committed offsets, the
    plan is stale and ConcurrentCommitError is raised at once.
    """
    began = time.monotonic()
    for attempt in range(1, max_commit_attempts + 1):
        try:
            outcome = _with_exact_dedup(
                partial(
                    _ingest_once,
                    spark,
                    spec,
                    ranges,
                    kafka_conf,
                    expected_start,
                    start_offsets,
                    decoder_factory,
                    catalog,
                    dict(lost or {}),
                )
            )
        except MainMovedError as exc:
            if attempt == max_commit_attempts:
                _add_plan_warnings(exc, warnings)
                raise
            continue
        except IngestError as exc:
            _add_plan_warnings(exc, warnings)
            raise
        except NotImplementedError:
            raise
        except Exception as exc:  # state reads, branch DDL: name the catalog, not py4j's call
            raise IngestError(
                f"table {spec.table_name} ({spec.identifier}) in {_catalog_named(spec, catalog)}: "
                f"the run failed, nothing was committed: {failure_cause(exc)}"
            ) from exc
        retried = (f"commit retried {attempt - 1} time(s): main moved during the write",)
        return replace(
            outcome,
            duration_s=time.monotonic() - began,
            warnings=(*warnings, *outcome.warnings, *(retried if attempt > 1 else ())),
        )
    raise AssertionError("unreachable: the last attempt returns or raises")


def _add_plan_warnings(error: IngestError, warnings: Sequence[str]) -> None:
    """The plan's warnings (e.g. records lost to retention) go in `error`'s outcome too:
    a failed run reports them as a passing one does."""
    if isinstance(error.outcome, IngestOutcome):
        error.outcome = replace(error.outcome, warnings=(*warnings, *error.outcome.warnings))


def _with_exact_dedup(run_once: Callable[..., IngestOutcome]) -> IngestOutcome:
    """`run_once()` (a bound `_ingest_once`), done again with Spark's shuffle dedup when
    the read tasks' dedup of the run was not exact (pipeline/transforms/read_task_dedup.py): its
    branch was dropped, nothing was published."""
    try:
        return run_once()
    except KeysAcrossReadTasks as exc:
        outcome = run_once(dedup_in_read_tasks=False)
        return replace(outcome, warnings=(*outcome.warnings, str(exc)))


def _empty_run(
    spec: IngestSpec, before: dict[int, int], snapshot_id: int | None, began: float
) -> IngestOutcome:
    """A run with no new records: nothing to read, write or commit. Its checks still
    judge its empty batch (a `row_count` with a minimum fails or warns on it)."""
    outcome = IngestOutcome(0, 0, 0, before, dict(before), snapshot_id, 0.0)
    compiled = spec.compiled
    if compiled is not None and compiled.checks.judge_empty_batch:
        report = empty_batch_report(
            compiled.checks.checks, f"{spec.table_name} ({spec.identifier})"
        )
        outcome = replace(outcome, warnings=tuple(report.warnings()), checks=report.as_dict())
        if report.blocks_publish:
            error = ChecksFailed(report.failure_message(), report.as_dict())
            error.outcome = replace(outcome, duration_s=time.monotonic() - began)
            raise error
    return replace(outcome, duration_s=time.monotonic() - began)


def failed_outcome(
    before: Mapping[int, int],
    error: IngestError,
    duration_s: float,
    warnings: Iterable[str],
    timings: Mapping[str, float],
) -> IngestOutcome:
    """What a run that failed knew (run_results.json reports it like a passing one):
    nothing was committed, the offsets stay where they were; the checks' report when
    they ran; the warnings and timings so far."""
    checks = error.report if isinstance(error, ChecksFailed) else None
    return IngestOutcome(
        records_read=0,
        records_written=0,
        failures=0,  # nothing was skipped: the bad records are named in the error
        offsets_before=dict(before),
        offsets_after=dict(before),
        snapshot_id=None,
        duration_s=duration_s,
        warnings=tuple(warnings),
        checks=checks,
        timings={name: round(seconds, 3) for name, seconds in timings.items()},
    )


def _ingest_once(
    spark: SparkSession,
    spec: IngestSpec,
    ranges: Sequence[OffsetRange],
    kafka_conf: Mapping[str, str],
    expected_start: Mapping[int, int],
    start_offsets: Mapping[int, int] | None,
    decoder_factory: DecoderFactory | None,
    catalog: Any,
    lost: dict[int, tuple[int, int]],
    dedup_in_read_tasks: bool = True,
) -> IngestOutcome:
    began = time.monotonic()
    table, state = _load(spec, catalog)
    loaded = time.monotonic()
    before = _check_expected(state, spec, expected_start)
    after = {**before, **dict(start_offsets or {})}
    for offset_range in ranges:
        after[offset_range.partition] = max(after.get(offset_range.partition, 0), offset_range.end)
    empty: IngestOutcome | None = None
    if not ranges:
        # No new records (none due, or every record due is gone and accepted): the
        # checks judge the empty batch first (a blocking failure commits nothing).
        empty = _empty_run(spec, before, state.current_snapshot_id, began)
        if not lost:
            return empty

    run_id = uuid.uuid4().hex[:16]
    branch = f"{BRANCH_PREFIX}{run_id}"
    stale = stale_branches(state)
    # One commit: the branch (and a new table's first snapshot), stale branches dropped.
    base_snapshot = start_run(table, branch, stale)
    lost_property = {LOST_OFFSETS_KEY: encode_lost_offsets(spec.topic, lost)} if lost else {}
    if empty is not None:
        # Every record due is gone (accepted): the offsets move past the loss, no Spark job.
        loaded_again = catalog.catalog.load_table((*spec.namespace, spec.table))
        properties = {OFFSETS_KEY: encode_offsets(spec.topic, after), **lost_property}
        snapshot = publish_run(loaded_again, base_snapshot, branch, properties)
        return replace(
            empty,
            offsets_after=after,
            snapshot_id=snapshot,
            committed_at_ms=committed_at_ms(loaded_again, snapshot),
            duration_s=time.monotonic() - began,
            lost=lost,
        )
    timings = {"load": loaded - began, "start_run": time.monotonic() - loaded}
    context = StageContext(
        spark=spark,
        spec=spec,
        run_id=run_id,
        branch=branch,
        ranges=tuple(ranges),
        offsets_after=after,
        expected_start=dict(expected_start),
        kafka_conf=dict(kafka_conf),
        catalog=catalog,
        decoder_factory=decoder_factory,
        base_snapshot_id=base_snapshot,
        base_rows=rows_at(table, base_snapshot),
        timings=timings,
        dedup_in_read_tasks=dedup_in_read_tasks
        and allowed_by_last_run(state.latest_on_main(KEYS_ACROSS_TASKS_PROPERTY)),
        # Main moved to this run's head: every other run branch seen before the run (at
        # the old head, or a crashed run's writes on top of it) can never be published now.
        other_branches=tuple(
            n for n in state.refs if n.startswith(BRANCH_PREFIX) and n not in stale
        ),
    )
    context.publish_properties.update(lost_property)
    batch: Batch | None = None
    try:
        try:
            batch = run_stages(context, spec.run_stages(), Batch())
        except (IngestError, NotImplementedError):
            raise
        except Exception as exc:
            raise IngestError(
                f"{context.where()} in {_catalog_named(spec, catalog)}: the write failed, "
                f"nothing was committed: {failure_cause(exc)}"
            ) from exc
    except IngestError as exc:
        exc.outcome = failed_outcome(
            before, exc, time.monotonic() - began, context.warnings, context.timings
        )
        raise
    finally:
        for cleanup in context.cleanups:
            cleanup()
        if batch is None or batch.snapshot_id is None:  # else the publish removed it
            drop_branches(catalog.catalog, (*spec.namespace, spec.table), [branch])
    accounting = batch.accounting.value
    checks = batch.checks.report.value if batch.checks is not None else None
    return IngestOutcome(
        records_read=batch.records_read,
        records_written=batch.records_written,
        failures=batch.bad_records,
        offsets_before=before,
        offsets_after=after,
        snapshot_id=batch.snapshot_id,
        committed_at_ms=batch.committed_at_ms,
        duration_s=time.monotonic() - began,
        tombstones=batch.tombstones,
        accounting=accounting.to_json() if accounting is not None else None,
        rows_skipped=batch.rows_skipped,
        transforms=batch.transforms.report() if batch.transforms is not None else None,
        checks=dict(checks) if checks is not None else None,
        timings={name: round(seconds, 3) for name, seconds in context.timings.items()},
        lost=lost,
        warnings=tuple(context.warnings),
    )
