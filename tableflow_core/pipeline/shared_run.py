"""Runs whose read tasks write their data files: many small tables in one Spark job, or
a large table in a job of its own; each table exactly once.

The run frame of `pipeline/run.py`, with the Spark work shared (ingest/sharing.py says
which tables; docs/exactly-once.md, "Jobs whose read tasks write the data files"):

1. per table, on the driver, concurrently: its committed offsets checked against the
   plan's (`ConcurrentCommitError` when they moved); a new table's first snapshot and its
   run's branch in one catalog commit (`engine/run_branch.begin_run`); an existing
   table's branch is cut by its publish commit (step 3), nothing is committed here;
2. one Spark job for all the tables: each task reads its tables' ranges with one consumer,
   decodes each table's records with its own decoder and writes its good rows as the
   table's data files, then reports them with its counts (`pipeline/shared_tasks.py`);
   a small job of upsert batches merged on the driver runs that task's function in the
   driver process instead (`reads_in_driver`);
3. per table, on the driver, concurrently: its bad-record policy (`fail` stops the table's
   run, naming the records), its accounting, its checks judged from the tasks' counts (a
   checked table: `ChecksFailed` stops its run); then the dead letters of every table
   appended to their Iceberg dead-letter tables, one append per dead-letter table
   (idempotent by source offset); then per table one catalog commit
   (`engine/run_branch.publish_run`): a snapshot on the run's branch holding the data
   files, the offsets and the accounting, main moved to it and the branch removed,
   accepted only while main is still where the run branched. An existing table's run is
   this one commit.

An upsert table's tasks send its decoded records to the driver instead of writing files:
step 3 merges them into the table as it is at the run's base (`pipeline/upsert_rows.py`:
data files, position delete files, and its tombstones remembered in the deletes table in
a commit of their own), then publishes data and deletes in the one snapshot. Its first
load (a table holding no rows) is written by its tasks as an append's rows are, each
task's rows reduced to each key's latest record; only their keys and places come to the
driver, which deletes the rows a later record of their key superseded in the same
snapshot (`pipeline/first_load.py`).

A data file is visible only once its table's publish names it: a crash anywhere leaves
each table with its data and offsets as they were before its own publish or after it,
whatever happened to the others (a file no publish names is an orphan, as those of a run
that failed). A table whose publish finds main moved (a compaction, another run) runs
again alone, through `pipeline/run.ingest`, which refuses when its offsets moved; so does
an upsert table too large for the driver's merge, or holding deletes it does not read.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tableflow_core.checks.arrow_checks import ENGINE as ARROW_ENGINE
from tableflow_core.checks.arrow_checks import CheckTally
from tableflow_core.checks.compile import CompiledCheck
from tableflow_core.checks.report import SAMPLES_PER_CHECK, CheckReport
from tableflow_core.checks.verdict import check_results, judge
from tableflow_core.config.models.dead_letter import IcebergDeadLetter
from tableflow_core.deadletter.accounting import RunAccounting
from tableflow_core.deadletter.sinks.base import SinkContext
from tableflow_core.deadletter.sinks.iceberg_driver_append import driver_max_rows
from tableflow_core.deadletter.sinks.iceberg_table import IcebergTableSink
from tableflow_core.engine.reader_process import read_groups, takes_groups
from tableflow_core.engine.run_branch import (
    BRANCH_PREFIX,
    begin_run,
    committed_at_ms,
    drop_branches,
    publish_run,
    rebase_point,
    rows_at,
    stale_branches,
)
from tableflow_core.engine.test_hooks import crash_point
from tableflow_core.errors import FailedRecord, IngestError, MainMovedError, TableflowError
from tableflow_core.ingest.sharing import UPSERT_DRIVER_MAX_RECORDS
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.ingest.stages import RouteBadRecords
from tableflow_core.ingest.upsert_order import deletes_table
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.pipeline.data_files import file_io_properties, slim_metadata
from tableflow_core.pipeline.first_load import merge_first_load
from tableflow_core.pipeline.run import (
    DecoderFactory,
    IngestOutcome,
    _catalog_named,
    _check_expected,
    _load,
    failed_outcome,
    failure_cause,
    ingest,
)
from tableflow_core.pipeline.runners.check import ChecksFailed
from tableflow_core.pipeline.runners.dead_letter import CatalogTables, null_values_warning
from tableflow_core.pipeline.runners.decode import key_spec
from tableflow_core.pipeline.runners.read_ranges import MIN_RECORDS_PER_TASK, task_groups
from tableflow_core.pipeline.shared_tasks import (
    MAX_REPORTED_FAILURES,
    REPORT_SCHEMA,
    SHARED_RANGES_ARROW,
    TableReport,
    TableWork,
    read_dead_letters,
    read_placed,
    read_upsert_rows,
    table_reports,
)
from tableflow_core.pipeline.upsert_rows import (
    DRIVER_MERGE_MAX_ROWS,
    DeletesTable,
    DriverMergeUnsupported,
    MergedBatch,
    build_index_ahead,
    merge_batch,
)
from tableflow_core.pipeline.vended_credentials import CredentialRefresh, refresh_table_io
from tableflow_core.schemas.decoding import build_decoder
from tableflow_core.sql_text import sql_string
from tableflow_core.state.offsets import OFFSETS_KEY, encode_offsets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Tables started and published at a time: each is a catalog round trip or two.
CATALOG_WORKERS = 8
# The decoded records (Arrow bytes) an upsert table's tasks send to the driver at most
# (shared between its tasks): the collect goes through the JVM driver (2 GB heap,
# spark.driver.maxResultSize 1 GB). Wide rows can pass it below the records limits
# (ingest/sharing.py); then the run goes to Spark, as a table the driver does not read.
UPSERT_DRIVER_MAX_BYTES = 512 * 2**20
# A job of upsert batches merged on the driver, of at most this many records, is read in
# the driver process: the Spark job's own cost (its scheduling, Python workers, a Kafka
# consumer per task, the reports' collect through the JVM) was ~0.5 s of a 100k batch's
# 0.8-1.0 s job, where the driver read and decoded the same ranges in 0.34-0.39 s (2 cores,
# docs/architecture.md, "Small upsert batches"). Two tasks' worth: above it, tasks in
# parallel win as cores are added.
DRIVER_READ_MAX_RECORDS = 2 * MIN_RECORDS_PER_TASK


@dataclass(frozen=True)
class SharedMember:
    """One table of a shared job, as the plan's ingest action gives it (spec bound)."""

    spec: IngestSpec
    ranges: tuple[OffsetRange, ...]
    expected_start: Mapping[int, int]  # the committed offsets the plan was made from
    start_offsets: Mapping[int, int]  # where each partition of the plan starts
    warnings: tuple[str, ...] = ()


@dataclass
class _Started:
    """A table whose run started (its branch exists, or its publish cuts it): what its
    publish needs."""

    member: SharedMember
    table: Any  # pyiceberg Table, as loaded (or as begin_run's commit left it)
    run_id: str
    branch: str
    base: int  # main's snapshot the branch was cut at
    before: dict[int, int]
    after: dict[int, int]
    other_branches: tuple[str, ...]
    began: float
    timings: dict[str, float] = field(default_factory=dict)
    # The branch is cut by the publish commit (an existing table: one commit a run), and
    # the stale run branches are removed by it.
    new_branch: bool = False
    stale: tuple[str, ...] = ()
    # An upsert table holding no rows at `base` (format v2): its tasks write its rows
    # (pipeline/first_load.py).
    first_load: bool = False


Result = IngestOutcome | BaseException


class _RunAlone(TableflowError):
    """A member whose run is not shared after all (found once its table is loaded: an
    upsert table too large for the driver's merge): it runs on its own, through
    `pipeline/run.ingest`, the way such a table always runs (no warning)."""


def ingest_shared(
    spark: Callable[[], SparkSession],
    members: Sequence[SharedMember],
    kafka_conf: Mapping[str, str],
    *,
    catalog: Any,
    decoder_factory: DecoderFactory | None = None,
) -> dict[str, Result]:
    """Run every member's ingest in one Spark job; each table's result by name: its
    IngestOutcome, or the error that stopped its run (nothing of it was committed).
    `spark` gives the Spark application, asked for once the tables' runs started (step
    1 needs none: it runs while the application may still be starting)."""
    results: dict[str, Result] = {}
    with ThreadPoolExecutor(CATALOG_WORKERS, thread_name_prefix="tableflow-shared") as pool:
        futures = [(m, pool.submit(_start, m, catalog)) for m in members]
        started: list[_Started] = []
        alone: list[SharedMember] = []
        for member, future in futures:
            try:
                started.append(future.result())
            except _RunAlone:
                alone.append(member)
            except Exception as exc:
                results[member.spec.table_name] = _failed(member.spec, catalog, exc)
        for member in alone:
            try:
                results[member.spec.table_name] = _ingest_alone(
                    spark, member, kafka_conf, catalog, decoder_factory, None
                )
            except Exception as exc:
                results[member.spec.table_name] = _failed(member.spec, catalog, exc)
        if not started:
            return results
        job_began = time.monotonic()
        try:
            reports = _run_job(spark, started, kafka_conf, decoder_factory)
        except Exception as exc:
            for run in started:
                _drop_branch(run, catalog)
                results[run.member.spec.table_name] = IngestError(
                    f"table {run.member.spec.table_name} ({run.member.spec.identifier}): the "
                    f"shared Spark job of {len(started)} tables failed, nothing was "
                    f"committed: {failure_cause(exc)}",
                    run_id=run.run_id,
                )
            return results
        job_s = time.monotonic() - job_began
        crash_point("shared_before_publish")
        for run in started:
            run.timings["shared_job"] = job_s
        ready = _prepare_all(pool, started, reports, catalog, results)
        on_spark = _append_dead_letters(pool, ready, catalog, results)
        crash_point("after_dead_letter")
        published = [
            (prep.run, pool.submit(_publish, spark, prep, kafka_conf, catalog, decoder_factory,
                                   on_spark.get(id(prep))))
            for prep in ready
            if prep.run.member.spec.table_name not in results
        ]  # fmt: skip
        for run, publishing in published:
            try:
                results[run.member.spec.table_name] = publishing.result()
            except Exception as exc:
                results[run.member.spec.table_name] = _failed(run.member.spec, catalog, exc)
    return results


@dataclass
class _Prepared:
    """A table whose tasks' reports passed its policy, accounting and checks: what its
    dead-letter append and its publish need."""

    run: _Started
    reports: Sequence[TableReport]
    merged: _Merged
    accounting: RunAccounting
    checks: CheckReport | None
    dead_letters: pa.Table | None


def _prepare_all(
    pool: ThreadPoolExecutor,
    started: Sequence[_Started],
    reports: Mapping[int, list[TableReport]],
    catalog: Any,
    results: dict[str, Result],
) -> list[_Prepared]:
    """Each table's reports judged (concurrently); a table that fails here has its branch
    dropped and its error in `results`."""
    futures = [
        (run, pool.submit(_prepare, run, reports.get(i, []))) for i, run in enumerate(started)
    ]
    ready = []
    for run, future in futures:
        try:
            ready.append(future.result())
        except Exception as exc:
            _stop(run, exc, catalog, results)
    return ready


def _stop(run: _Started, exc: Exception, catalog: Any, results: dict[str, Result]) -> None:
    """A table whose run stops after its start: its branch dropped, its error kept."""
    _drop_branch(run, catalog)
    results[run.member.spec.table_name] = _failed(run.member.spec, catalog, exc)


def _prepare(run: _Started, reports: Sequence[TableReport]) -> _Prepared:
    """The table's bad-record policy, accounting and checks, from its tasks' reports."""
    refresh_table_io(run.table)
    merged = _Merged.of(reports)
    accounting = _accounting(run, merged)
    checks = _checks_report(run, merged)
    return _Prepared(run, reports, merged, accounting, checks, read_dead_letters(reports))


def _append_dead_letters(
    pool: ThreadPoolExecutor,
    ready: Sequence[_Prepared],
    catalog: Any,
    results: dict[str, Result],
) -> dict[int, str]:
    """Every table's dead letters appended to its Iceberg dead-letter table before any
    publish: one driver append per dead-letter table for all the tables of the job that
    write to it (idempotent by source offset: a re-run after a crash adds none twice).
    A failed append fails its tables (branches dropped, errors in `results`). Returns the
    tables (by `id()` of their _Prepared) whose dead letters are more than the driver
    appends, with why: they run again on their own, where Spark's MERGE writes them."""
    by_target: dict[str, list[_Prepared]] = {}
    for prep in ready:
        if prep.dead_letters is not None and prep.dead_letters.num_rows:
            target = prep.run.member.spec.dead_letter
            assert isinstance(target, IcebergDeadLetter)  # ingest/sharing.py shares no other
            by_target.setdefault(target.table, []).append(prep)
    on_spark: dict[int, str] = {}
    budget = driver_max_rows()
    futures = []
    for table, group in by_target.items():
        rows = sum(p.dead_letters.num_rows for p in group if p.dead_letters is not None)
        if rows > budget:
            why = (
                f"{rows:,} dead letters for {table}, more than the driver appends ({budget:,}): "
                "the table ran again on its own, Spark's MERGE wrote them"
            )
            on_spark.update({id(p): why for p in group})
            continue
        futures.append((group, pool.submit(_append_to, group, catalog)))
    for group, future in futures:
        try:
            future.result()
        except Exception as exc:
            for prep in group:
                _stop(prep.run, exc, catalog, results)
    return on_spark


def _append_to(group: Sequence[_Prepared], catalog: Any) -> None:
    """The dead letters of `group` (tables sharing a dead-letter table) in one append."""
    first = group[0].run.member.spec
    target = first.dead_letter
    assert isinstance(target, IcebergDeadLetter)
    context = SinkContext(
        table=", ".join(p.run.member.spec.table_name for p in group),
        run_id=",".join(p.run.run_id for p in group),
        spark_catalog=first.catalog,
        catalog_address=str(getattr(catalog, "address", "") or ""),
        iceberg_tables=CatalogTables(catalog.catalog),
    )
    rows = pa.concat_tables([p.dead_letters for p in group if p.dead_letters is not None])
    started = time.monotonic()
    IcebergTableSink(target, context).append_rows(rows)
    for prep in group:
        prep.run.timings["dead_letter_write"] = time.monotonic() - started


def _failed(spec: IngestSpec, catalog: Any, exc: Exception) -> BaseException:
    """A run stopped before its branch: IngestErrors as they are, others named."""
    if isinstance(exc, IngestError | NotImplementedError):
        return exc
    return IngestError(
        f"table {spec.table_name} ({spec.identifier}) in {_catalog_named(spec, catalog)}: "
        f"the run failed, nothing was committed: {failure_cause(exc)}"
    )


def _start(member: SharedMember, catalog: Any) -> _Started:
    """Check the table's committed offsets, then cut its run's branch (one commit)."""
    began = time.monotonic()
    spec = member.spec
    table, state = _load(spec, catalog)
    loaded = time.monotonic()
    before = _check_expected(state, spec, member.expected_start)
    after = {**before, **dict(member.start_offsets)}
    for offset_range in member.ranges:
        after[offset_range.partition] = max(after.get(offset_range.partition, 0), offset_range.end)
    run_id = uuid.uuid4().hex[:16]
    branch = f"{BRANCH_PREFIX}{run_id}"
    stale = stale_branches(state)
    other = tuple(n for n in state.refs if n.startswith(BRANCH_PREFIX) and n not in stale)
    main = state.current_snapshot_id
    rows = 0 if main is None else rows_at(table, main)
    if spec.mode == "upsert" and main is not None:
        if rows is None or rows > DRIVER_MERGE_MAX_ROWS:
            raise _RunAlone(
                f"upsert: the table holds {'an unknown number of' if rows is None else rows} "
                f"rows, more than the driver's merge reads ({DRIVER_MERGE_MAX_ROWS:,}); "
                "the run took Spark's MERGE"
            )
        records = sum(r.size for r in member.ranges)
        if rows and records > UPSERT_DRIVER_MAX_RECORDS:
            # Planned as a first load (the plan created the table), and another run filled
            # it since: the driver holds only a small batch merged into rows.
            raise _RunAlone(
                f"upsert: {records:,} records into a table that holds rows, more than the "
                f"driver's merge holds ({UPSERT_DRIVER_MAX_RECORDS:,}); the run took Spark's MERGE"
            )
    if main is None:
        # A new table: its first snapshot and the run's branch in one commit of their own.
        base, table = begin_run(table, branch, stale)
        stale, new_branch = [], False
    else:
        # The publish cuts the branch, adds the files and moves main in one commit.
        base, new_branch = main, True
    timings = {"load": loaded - began, "start_run": time.monotonic() - loaded}
    first_load = spec.mode == "upsert" and rows == 0 and table.metadata.format_version == 2
    return _Started(
        member, table, run_id, branch, base, before, after, other, began, timings,
        new_branch=new_branch, stale=tuple(stale), first_load=first_load,
    )  # fmt: skip


def _run_job(
    spark: Callable[[], SparkSession],
    started: Sequence[_Started],
    kafka_conf: Mapping[str, str],
    decoder_factory: DecoderFactory | None,
) -> dict[int, list[TableReport]]:
    """The one Spark job: every table's ranges read, decoded and written; the reports by
    the table's index in `started`. A small job of upsert batches the driver merges runs
    its tasks in the driver instead (`reads_in_driver`), beside its reader process."""
    tagged = [(i, r) for i, run in enumerate(started) for r in run.member.ranges]
    in_driver = reads_in_driver(started)
    # In the driver: one task (one consumer, the whole budget of upsert bytes), unless the
    # reader process beside it takes all groups but the first.
    groups = [tagged] if in_driver and not takes_groups() else _task_groups(tagged)
    works = {
        i: TableWork(
            member=i,
            decoder=run.member.spec.decoder,
            run_id=run.run_id,
            chunk_size=run.member.spec.decode_chunk_size,
            metadata=slim_metadata(run.table.metadata),
            io_properties=file_io_properties(run.table.io.properties),
            credentials=CredentialRefresh.of(run.table),
            key=key_spec(run.member.spec),
            first_load=run.first_load,
            cdc=run.member.spec.value.envelope is not None,
            max_upsert_bytes=UPSERT_DRIVER_MAX_BYTES // max(1, _tasks_of(i, groups)),
            checks=_checks_of(run.member.spec),
            dead_letter_bad=_on_error(run.member.spec) == "dlq",
        )
        for i, run in enumerate(started)
    }
    reader = table_reports(dict(kafka_conf), works, decoder_factory or build_decoder)
    if in_driver:
        for i, run in enumerate(started):  # on the other core while the driver reads
            if run.table.metadata.format_version == 2:
                build_index_ahead(run.table, run.base, run.member.spec.key_columns, works[i].cdc)
        rows = _in_driver(reader, groups)
    else:
        rows = _collected(_ranges_frame(spark(), groups).mapInArrow(reader, REPORT_SCHEMA))
    reports: dict[int, list[TableReport]] = {}
    for member, report in rows:
        reports.setdefault(member, []).append(TableReport.decode(report))
    return reports


def reads_in_driver(started: Sequence[_Started]) -> bool:
    """Whether the job's ranges are read in the driver process (and its reader): every
    table an upsert batch merged on the driver (its rows come to the driver anyway), at
    most DRIVER_READ_MAX_RECORDS records in all."""
    records = sum(r.size for run in started for r in run.member.ranges)
    return records <= DRIVER_READ_MAX_RECORDS and all(
        run.member.spec.mode == "upsert" and not run.first_load for run in started
    )


def _in_driver(
    reader: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    groups: Sequence[Sequence[Tagged]],
) -> Iterator[tuple[int, bytes]]:
    """The job's report rows (member, report), each group's ranges read by `reader` as a
    Spark task would (the same function): the first here, the others by the driver's
    reader process meanwhile (`engine/reader_process.py`)."""
    yield from read_groups(reader, [_ranges_batch(group) for group in groups])


def _ranges_batch(group: Sequence[Tagged]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [
            {"member": m, "topic": r.topic, "partition": r.partition, "start": r.start,
             "end": r.end}
            for m, r in group
        ],
        schema=SHARED_RANGES_ARROW,
    )  # fmt: skip


def _collected(reports: DataFrame) -> Iterator[tuple[int, bytes]]:
    """The job's report rows (member, report) on the driver, through Spark's Arrow
    collect (what `toPandas` uses): the reports' bytes cross from the JVM as Arrow
    buffers, not as pickled rows. An upsert table's rows or places are tens to hundreds
    of MB: 128 MB of reports took 3.1-3.9 s through `collect()` and 1.9 s so, on 2 cores
    (docs/architecture.md, "A first load")."""
    for batch in reports._collect_as_arrow():
        yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True)


Tagged = tuple[int, OffsetRange]


def _tasks_of(member: int, groups: Sequence[Sequence[Tagged]]) -> int:
    """How many of the job's tasks read the member's ranges."""
    return sum(1 for group in groups if any(m == member for m, _ in group))


def _task_groups(tagged: Sequence[Tagged]) -> list[list[Tagged]]:
    """The tables' ranges in as many tasks as there are MIN_RECORDS_PER_TASK to read (at
    least one), each table's ranges together, the largest tables first into the lightest
    task (read_ranges.task_groups, for tables instead of ranges); a job of one table
    spreads its ranges as read_ranges.task_groups does."""
    by_table: dict[int, list[OffsetRange]] = {}
    for member, offset_range in tagged:
        by_table.setdefault(member, []).append(offset_range)
    if len(by_table) == 1:  # a job of its own: its ranges over tasks as its own run's
        ((member, ranges),) = by_table.items()
        return [[(member, r) for r in group] for group in task_groups(ranges)]
    size = {m: sum(r.end - r.start for r in ranges) for m, ranges in by_table.items()}
    count = max(1, min(len(by_table), math.ceil(sum(size.values()) / MIN_RECORDS_PER_TASK)))
    groups: list[list[Tagged]] = [[] for _ in range(count)]
    loads = [0] * count
    for member in sorted(by_table, key=lambda m: (-size[m], m)):
        lightest = loads.index(min(loads))
        groups[lightest].extend((member, r) for r in by_table[member])
        loads[lightest] += size[member]
    return groups


def _ranges_frame(spark: SparkSession, groups: Sequence[Sequence[Tagged]]) -> DataFrame:
    """The tagged ranges as a DataFrame (SHARED_RANGES_SCHEMA), a Spark partition per
    group, built in the JVM from one SQL literal (read_ranges.ranges_frame's way)."""

    def struct(member: int, r: OffsetRange) -> str:
        return (
            f"named_struct('member', CAST({int(member)} AS INT), "
            f"'topic', {sql_string(r.topic)}, 'partition', CAST({int(r.partition)} AS INT), "
            f"'start', CAST({int(r.start)} AS BIGINT), 'end', CAST({int(r.end)} AS BIGINT))"
        )

    literal = (
        "array("
        + ", ".join("array(" + ", ".join(struct(m, r) for m, r in g) + ")" for g in groups)
        + ")"
    )
    count = len(groups)
    return spark.sql(
        f"SELECT inline(element_at({literal}, CAST(id + 1 AS INT))) "
        f"FROM range(0, {count}, 1, {count})"
    )


@dataclass
class _Merged:
    """A table's reports from the tasks that read its ranges, added up."""

    read: dict[int, int] = field(default_factory=dict)
    bad: dict[int, int] = field(default_factory=dict)
    written: dict[int, int] = field(default_factory=dict)
    tombstones: dict[int, int] = field(default_factory=dict)
    failures: list[FailedRecord] = field(default_factory=list)
    data_files: list[Any] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # A checked table: its checks' tally, and the rows its skip and dlq checks took out.
    checks: CheckTally | None = None
    skipped: dict[int, int] = field(default_factory=dict)
    dead_lettered: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, reports: Sequence[TableReport]) -> _Merged:
        merged = cls()
        for report in reports:
            for mine, theirs in (
                (merged.read, report.read),
                (merged.bad, report.bad),
                (merged.written, report.written),
                (merged.tombstones, report.tombstones),
                (merged.skipped, report.skipped),
                (merged.dead_lettered, report.dead_lettered),
            ):
                _count_into(mine, theirs)
            merged.failures.extend(report.failures)
            merged.data_files.extend(report.data_files)
            if report.error:
                merged.errors.append(report.error)
            if report.checks is not None:
                merged.checks = merged.checks or CheckTally()
                merged.checks.add(report.checks, SAMPLES_PER_CHECK)
        merged.failures.sort(key=lambda f: (f.partition, f.offset))
        del merged.failures[MAX_REPORTED_FAILURES:]
        return merged


def _on_error(spec: IngestSpec) -> str:
    routes = [s for s in spec.run_stages() if isinstance(s, RouteBadRecords)]
    return routes[0].on_error if routes else "fail"


def _publish(
    spark: Callable[[], SparkSession],
    prep: _Prepared,
    kafka_conf: Mapping[str, str],
    catalog: Any,
    decoder_factory: DecoderFactory | None,
    dead_letters_on_spark: str | None = None,
) -> IngestOutcome:
    """The table's publish commit (an upsert table's batch merged first); on a main that
    moved, or dead letters the driver does not append, the table's run again on its own."""
    run, merged, accounting, checks = prep.run, prep.merged, prep.accounting, prep.checks
    spec = run.member.spec
    if dead_letters_on_spark is not None:
        _drop_branch(run, catalog)
        return _ingest_alone(
            spark, run.member, kafka_conf, catalog, decoder_factory, dead_letters_on_spark
        )
    try:
        delta = _merge_upsert(run, prep.reports, catalog) if spec.mode == "upsert" else None
        started = time.monotonic()
        properties = {
            OFFSETS_KEY: encode_offsets(spec.topic, run.after),
            **accounting.snapshot_summary(),
            **(checks.summary_properties() if checks is not None else {}),
        }
        snapshot_id = _publish_commit(
            run,
            properties,
            delta.data_files if delta is not None else merged.data_files,
            delta.delete_files if delta is not None else (),
            catalog,
        )
        run.timings["publish_commit"] = time.monotonic() - started
    except MainMovedError as exc:
        _drop_branch(run, catalog)
        why = f"the shared job's commit was refused ({exc}); the table ran again on its own"
        return _ingest_alone(spark, run.member, kafka_conf, catalog, decoder_factory, why)
    except DriverMergeUnsupported as exc:
        _drop_branch(run, catalog)
        why = f"upsert: the driver's merge does not read this table ({exc}); Spark's MERGE ran"
        return _ingest_alone(spark, run.member, kafka_conf, catalog, decoder_factory, why)
    except BaseException:
        _drop_branch(run, catalog)
        raise
    crash_point("after_commit")
    crash_point("shared_after_publish")
    if delta is not None and delta.advance_index is not None:
        started = time.monotonic()
        delta.advance_index(snapshot_id)  # the key index kept at main for the next batch
        run.timings["index_advance"] = time.monotonic() - started
    totals = accounting.totals
    # An upsert table's tombstones are its deletes, not null values an append table drops.
    null_values = None if delta is not None else null_values_warning(spec.topic, merged.tombstones)
    warnings = (
        *run.member.warnings,
        *([null_values] if null_values else []),
        *(checks.warnings() if checks is not None else ()),
    )
    return IngestOutcome(
        records_read=totals["read"],
        records_written=totals["written"],
        failures=sum(merged.bad.values()),
        rows_skipped=sum(merged.skipped.values()),
        checks=checks.as_dict() if checks is not None else None,
        offsets_before=run.before,
        offsets_after=run.after,
        snapshot_id=snapshot_id,
        committed_at_ms=committed_at_ms(run.table, snapshot_id),
        duration_s=time.monotonic() - run.began,
        warnings=warnings,
        accounting=accounting.to_json(),
        timings={name: round(seconds, 3) for name, seconds in run.timings.items()},
    )


def _publish_commit(
    run: _Started,
    properties: Mapping[str, str],
    data_files: Sequence[Any],
    delete_files: Sequence[Any],
    catalog: Any,
) -> int:
    """The run's publish commit. An append refused because maintenance moved main by
    `replace` snapshots meanwhile (`tableflow run` compacts such tables beside their
    ingest) is published on top of them, once: its data files and offsets are as right
    there (`run_branch.rebase_point`). Anything else is refused as before."""

    def publish() -> int:
        return publish_run(
            run.table,
            run.base,
            run.branch,
            properties,
            run.other_branches,
            before_commit=lambda: crash_point("before_commit"),
            data_files=data_files,
            delete_files=delete_files,
            new_branch=run.new_branch,
            stale=run.stale,
        )

    try:
        return publish()
    except MainMovedError:
        if delete_files or not run.new_branch:
            raise
        started = time.monotonic()
        spec = run.member.spec
        table = catalog.catalog.load_table((*spec.namespace, spec.table))
        onto = rebase_point(table, run.base)
        if onto is None:
            raise
        run.table, run.base = table, onto
        published = publish()
        run.timings["publish_rebased"] = time.monotonic() - started
        return published


def _ingest_alone(
    spark: Callable[[], SparkSession],
    member: SharedMember,
    kafka_conf: Mapping[str, str],
    catalog: Any,
    decoder_factory: DecoderFactory | None,
    why: str | None,
) -> IngestOutcome:
    """The member's run on its own (`pipeline/run.ingest`), `why` among its warnings."""
    spec = member.spec
    alone = ingest(
        spark(), spec, member.ranges, kafka_conf, member.expected_start,
        start_offsets=member.start_offsets, decoder_factory=decoder_factory,
        warnings=member.warnings, catalog=catalog,
    )  # fmt: skip
    return replace(alone, warnings=(*alone.warnings, why)) if why else alone


def _merge_upsert(run: _Started, reports: Sequence[TableReport], catalog: Any) -> MergedBatch:
    """An upsert table's batch merged on the driver (pipeline/upsert_rows.py): its data
    and delete files written, its tombstones remembered in the deletes table (a commit of
    its own, while the files are written, before the publish: a run that does not publish
    leaves there only positions of records the next run reads again)."""
    spec = run.member.spec
    if any(r.too_large for r in reports):
        raise DriverMergeUnsupported(
            f"its records took more than {UPSERT_DRIVER_MAX_BYTES / 2**20:g} MiB of Arrow, "
            "more than the driver holds"
        )
    started = time.monotonic()
    cdc = spec.value.envelope is not None
    deletes = DeletesTable(
        catalog.catalog, (*spec.namespace, deletes_table(spec.table)), spec.key_columns, cdc
    )
    if run.first_load:
        placed, data_files = read_placed(reports)
        if placed is None:
            return MergedBatch(data_files=data_files)
        delta = merge_first_load(run.table, placed, data_files, spec.key_columns, deletes.read, cdc)
    else:
        rows = read_upsert_rows(reports)
        if rows is None or rows.num_rows == 0:
            return MergedBatch()
        delta = merge_batch(
            run.table,
            run.base,
            rows,
            spec.key_columns,
            deletes.read,
            file_io_properties(run.table.io.properties),
            cdc,
            remember=deletes.remember,
        )
    run.timings["merge"] = time.monotonic() - started
    run.timings.update(delta.timings)
    if delta.remembered is not None:
        started = time.monotonic()
        deletes.remember(delta.remembered)
        run.timings["remember_deletes"] = time.monotonic() - started
    crash_point("after_merge")
    return delta


def _checks_of(spec: IngestSpec) -> tuple[CompiledCheck, ...]:
    """The checks a shared job's read tasks judge: an append table's, all row-local
    (ingest/sharing.py lets no other checked table share a job)."""
    if spec.compiled is None or spec.mode != "append":
        return ()
    return spec.compiled.checks.checks


def _checks_report(run: _Started, merged: _Merged) -> CheckReport | None:
    """The checks judged from the read tasks' tally (checks/verdict.py, as Spark's
    aggregate is judged); ChecksFailed when one stops the publish."""
    checks = _checks_of(run.member.spec)
    if not checks:
        return None
    spec = run.member.spec
    tally = merged.checks or CheckTally()
    judged = [judge(c, tally.failing.get(i, 0), tally.rows) for i, c in enumerate(checks)]
    samples = {checks[i].name: tuple(rows) for i, rows in tally.samples.items()}
    report = CheckReport(
        table=f"{spec.table_name} ({spec.identifier})",
        results=check_results(checks, judged, tally.rows, samples),
        rows_evaluated=tally.rows,
        rows_skipped=sum(merged.skipped.values()),
        rows_dead_lettered=sum(merged.dead_lettered.values()),
        duration_s=tally.seconds,
        engine=ARROW_ENGINE,
    )
    if report.blocks_publish:
        error = ChecksFailed(report.failure_message(), report.as_dict())
        warnings = (*run.member.warnings, *report.warnings())
        error.outcome = failed_outcome(
            run.before, error, time.monotonic() - run.began, warnings, run.timings
        )
        raise error
    return report


def _accounting(run: _Started, merged: _Merged) -> RunAccounting:
    """The table's bad records by its policy (`fail`: IngestError naming them), then the
    run's accounting, checked."""
    spec = run.member.spec
    if merged.errors:
        raise IngestError(
            f"table {spec.table_name} ({spec.identifier}), topic {spec.topic!r}: the write "
            f"failed, nothing was committed: {merged.errors[0]}",
            run_id=run.run_id,
        )
    bad = sum(merged.bad.values())
    policy = _on_error(spec)
    if bad and policy == "fail":
        listed = "; ".join(f.describe() for f in merged.failures)
        more = f" (first {len(merged.failures)} listed)" if bad > len(merged.failures) else ""
        raise IngestError(
            f"table {spec.table_name} ({spec.identifier}): {bad} record(s) could not be "
            f"decoded, nothing was committed{more}: {listed}",
            merged.failures,
            run_id=run.run_id,
        )
    # Undecodable records go by the table's policy; rows the checks took out, by theirs.
    # A shared run filters nothing (no transforms): every record read is counted where it
    # went, so a partition that does not add up fails the check, none is called filtered.
    return RunAccounting.from_counts(
        spec.table_name,
        spec.topic,
        run.run_id,
        read=merged.read,
        written=merged.written,
        tombstones=merged.tombstones,
        skipped=_added(merged.skipped, merged.bad if policy == "skip" else {}),
        dead_lettered=_added(merged.dead_lettered, merged.bad if policy == "dlq" else {}),
    ).check()


def _count_into(total: dict[int, int], counts: Mapping[int, int]) -> None:
    """Add per-partition `counts` to `total`."""
    for partition, count in counts.items():
        total[partition] = total.get(partition, 0) + count


def _added(*counts: Mapping[int, int]) -> dict[int, int]:
    total: dict[int, int] = {}
    for by_partition in counts:
        _count_into(total, by_partition)
    return total


def _drop_branch(run: _Started, catalog: Any) -> None:
    spec = run.member.spec
    drop_branches(catalog.catalog, (*spec.namespace, spec.table), [run.branch])


__all__ = ["SharedMember", "ingest_shared"]
