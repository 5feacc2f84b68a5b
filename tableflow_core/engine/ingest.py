"""One exactly-once ingest run: Kafka ranges -> Spark tasks -> one Iceberg commit.

How a run commits (see docs/exactly-once.md):
1. read the table's committed offsets at the current snapshot S of `main` and
   refuse to run unless they equal `expected_start`;
2. create a private branch `tableflow_run_<id>` at S;
3. Spark tasks read their offset ranges (mapInArrow), decode, and the Iceberg
   runtime appends to the branch, with the new offsets in the snapshot summary;
4. `fast_forward` main to the branch: Iceberg only does it if main is still an
   ancestor of the branch, i.e. nobody committed to main since S. The catalog's
   optimistic concurrency makes this check-and-set atomic.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tableflow_core.engine.ddl import spark_schema_for, target_arrow_schema
from tableflow_core.engine.table_state import TableState, read_table_state
from tableflow_core.engine.test_hooks import crash_point
from tableflow_core.ingest.spec import IngestSpec, quote_ident
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.state.offsets import OFFSETS_KEY, encode_offsets

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

BRANCH_PREFIX = "tableflow_run_"
_FAILURE_MARKER = "TABLEFLOW_DECODE_FAILURES"
_FAILURE_PATTERN = re.compile(_FAILURE_MARKER + r" (\[.*?\]) END")
MAX_REPORTED_FAILURES = 20


@dataclass(frozen=True)
class FailedRecord:
    topic: str
    partition: int
    offset: int
    reason: str

    def describe(self) -> str:
        return (
            f"topic {self.topic!r} partition {self.partition} offset {self.offset}: {self.reason}"
        )


class IngestError(RuntimeError):
    """The run failed and committed nothing; `failures` names the records at fault."""

    def __init__(self, message: str, failures: Sequence[FailedRecord] = ()) -> None:
        super().__init__(message)
        self.failures = tuple(failures)


class ConcurrentCommitError(IngestError):
    """Someone else committed to the table since this run was planned: re-plan and retry."""


class MainMovedError(ConcurrentCommitError):
    """`main` moved while this run wrote its branch (the run's data stays invisible)."""


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


DecoderFactory = Callable[[Any], Any]


def _default_decoder_factory(spec: Any) -> Any:
    from tableflow_core.schemas.decoding import build_decoder

    return build_decoder(spec)


def _read_and_decode(
    kafka_conf: dict[str, str],
    decoder_spec: Any,
    decoder_factory: DecoderFactory,
    chunk_size: int,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function: each input row is a range; output rows are table rows."""

    def run(range_batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from tableflow_core.kafka.range_reader import read_range

        decoder = decoder_factory(decoder_spec)
        for range_batch in range_batches:
            for row in range_batch.to_pylist():
                offset_range = OffsetRange(row["topic"], row["partition"], row["start"], row["end"])
                for messages in read_range(kafka_conf, offset_range, chunk_size=chunk_size):
                    result = decoder.decode(messages)
                    if result.failures:
                        details = [
                            {
                                "topic": f.topic,
                                "partition": f.partition,
                                "offset": f.offset,
                                "reason": f.reason,
                            }
                            for f in result.failures[:MAX_REPORTED_FAILURES]
                        ]
                        # Parsed back on the driver by _decode_failures(); one line of JSON.
                        raise RuntimeError(f"{_FAILURE_MARKER} {json.dumps(details)} END")
                    if result.batch.num_rows:
                        yield result.batch

    return run


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


def _short_class(line: str) -> str:
    """'tableflow_core.kafka.range_reader.KafkaReadError: msg' -> 'KafkaReadError: msg'."""
    qualified, _, message = line.partition(": ")
    return f"{qualified.rsplit('.', 1)[-1]}: {message}"


def _decode_failures(error: BaseException) -> list[FailedRecord] | None:
    match = _FAILURE_PATTERN.search(str(error))
    if match is None:
        return None
    return [FailedRecord(**item) for item in json.loads(match.group(1))]


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


def _drop_branch(spark: SparkSession, identifier: str, branch: str) -> None:
    with contextlib.suppress(Exception):
        spark.sql(f"ALTER TABLE {identifier} DROP BRANCH IF EXISTS {quote_ident(branch)}")


def drop_stale_branches(spark: SparkSession, identifier: str, state: TableState) -> list[str]:
    """Drop run branches that can never be fast-forwarded or were already merged.

    A branch of a run still in flight is at main's head or a descendant of it; those
    are kept. Branches left behind by crashed runs end up behind or beside main.
    """
    main = state.current_snapshot_id
    main_ancestry = set(state.ancestors_of(main))
    dropped = []
    for name, head in state.refs.items():
        if not name.startswith(BRANCH_PREFIX) or head == main:
            continue
        merged = head in main_ancestry
        descends_from_main = main is None or main in state.ancestors_of(head)
        if merged or not descends_from_main:
            _drop_branch(spark, identifier, name)
            dropped.append(name)
    return dropped


def _ranges_frame(spark: SparkSession, ranges: Sequence[OffsetRange]) -> Any:
    rows = [(r.topic, r.partition, r.start, r.end) for r in ranges]
    rdd = spark.sparkContext.parallelize(rows, len(rows))
    return spark.createDataFrame(rdd, "topic string, partition int, start long, `end` long")


def _ensure_snapshot(spark: SparkSession, spec: IngestSpec, state: TableState) -> TableState:
    """Branches need a snapshot to start from: give a new table an empty first commit."""
    if state.current_snapshot_id is not None:
        return state
    schema = spark.table(spec.identifier).schema
    spark.createDataFrame([], schema).writeTo(spec.identifier).append()
    return read_table_state(spark, spec.identifier)


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
    max_commit_attempts: int = 3,
) -> IngestOutcome:
    """Read `ranges`, append them to the table and commit their offsets atomically.

    `expected_start`: the table's committed offsets the plan was made from ({} for a
    table that never committed). `start_offsets`: where each partition of the plan
    starts (defaults to the range starts); recorded for partitions without ranges so
    a later run never re-applies `start_from` to them.

    Commit conflicts are retried: when `main` moved during the write but its committed
    offsets did not (a compaction, a manual commit), the run writes again from the new
    `main`, up to `max_commit_attempts` times. When another run committed offsets, the
    plan is stale and ConcurrentCommitError is raised at once.
    """
    began = time.monotonic()
    for attempt in range(1, max_commit_attempts + 1):
        try:
            outcome = _ingest_once(
                spark, spec, ranges, kafka_conf, expected_start, start_offsets, decoder_factory
            )
        except MainMovedError:
            if attempt == max_commit_attempts:
                raise
            continue
        retried = (f"commit retried {attempt - 1} time(s): main moved during the write",)
        return replace(
            outcome,
            duration_s=time.monotonic() - began,
            warnings=(*warnings, *(retried if attempt > 1 else ())),
        )
    raise AssertionError("unreachable: the last attempt returns or raises")


def _ingest_once(
    spark: SparkSession,
    spec: IngestSpec,
    ranges: Sequence[OffsetRange],
    kafka_conf: Mapping[str, str],
    expected_start: Mapping[int, int],
    start_offsets: Mapping[int, int] | None,
    decoder_factory: DecoderFactory | None,
) -> IngestOutcome:
    began = time.monotonic()
    identifier = spec.identifier
    state = read_table_state(spark, identifier)
    before = _check_expected(state, spec, expected_start)
    after = {**before, **dict(start_offsets or {})}
    for offset_range in ranges:
        after[offset_range.partition] = max(after.get(offset_range.partition, 0), offset_range.end)
    if not ranges:
        return IngestOutcome(
            0,
            0,
            0,
            before,
            before,
            state.current_snapshot_id,
            time.monotonic() - began,
        )

    drop_stale_branches(spark, identifier, state)
    state = _ensure_snapshot(spark, spec, state)
    _check_expected(state, spec, expected_start)
    base_snapshot = state.current_snapshot_id
    branch = f"{BRANCH_PREFIX}{uuid.uuid4().hex[:16]}"
    spark.sql(
        f"ALTER TABLE {identifier} CREATE BRANCH {quote_ident(branch)} AS OF VERSION {base_snapshot}"
    )
    try:
        arrow_schema = target_arrow_schema(spec)
        mapper = _read_and_decode(
            dict(kafka_conf),
            spec.decoder,
            decoder_factory or _default_decoder_factory,
            spec.decode_chunk_size,
        )
        data = _ranges_frame(spark, ranges).mapInArrow(mapper, spark_schema_for(arrow_schema))
        try:
            (
                data.writeTo(f"{identifier}.{quote_ident('branch_' + branch)}")
                .option(f"snapshot-property.{OFFSETS_KEY}", encode_offsets(spec.topic, after))
                .append()
            )
        except Exception as exc:
            failures = _decode_failures(exc)
            if failures is None:
                raise IngestError(
                    f"table {spec.table_name} ({identifier}), topic {spec.topic!r}: the write "
                    f"failed, nothing was committed: {root_cause(exc)}"
                ) from exc
            listed = "; ".join(f.describe() for f in failures)
            raise IngestError(
                f"table {spec.table_name} ({identifier}): {len(failures)} record(s) could not be "
                f"decoded, nothing was committed: {listed}",
                failures,
            ) from None
        crash_point("before_commit")
        _fast_forward_main(spark, spec, branch, expected_start)
        crash_point("after_commit")
    finally:
        _drop_branch(spark, identifier, branch)
    committed_state = read_table_state(spark, identifier)
    drop_stale_branches(spark, identifier, committed_state)
    new_snapshot = committed_state.current_snapshot_id
    summary = next(
        (s.summary for s in committed_state.snapshots if s.snapshot_id == new_snapshot), {}
    )
    written = int(summary.get("added-records", 0))
    return IngestOutcome(
        records_read=written,
        records_written=written,
        failures=0,
        offsets_before=before,
        offsets_after=after,
        snapshot_id=new_snapshot,
        duration_s=time.monotonic() - began,
    )


def _fast_forward_main(
    spark: SparkSession, spec: IngestSpec, branch: str, expected_start: Mapping[int, int]
) -> None:
    # Fully qualified: a bare "ns.table" is misread when the namespace equals a catalog name.
    table_arg = spec.identifier.replace("'", "\\'")
    try:
        spark.sql(
            f"CALL {quote_ident(spec.catalog)}.system.fast_forward("
            f"table => '{table_arg}', branch => 'main', to => '{branch}')"
        )
    except Exception as exc:
        # "Ref does not exist": a later run dropped our branch because main moved past it.
        if any(s in str(exc) for s in ("not an ancestor", "CommitFailed", "Ref does not exist")):
            raise MainMovedError(
                f"table {spec.table_name} ({spec.identifier}): another commit landed on main "
                f"while this run wrote (planned from offsets {dict(expected_start)}); this "
                "run's data was discarded, nothing was committed. Plan again."
            ) from exc
        raise
