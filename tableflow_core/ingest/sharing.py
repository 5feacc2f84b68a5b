"""Which runs write their data files in their read tasks, and which share a Spark job
(pure: `plan` decides, apply runs what it says).

Spark's Iceberg writer costs a plain append run more than the run's own work: the rows
cross from the Python workers to the JVM as Arrow, become Spark rows and are encoded to
Parquet again by the JVM, then the writer's commit; ~130 ms of JVM CPU for a table of 200
records, and 20.3 CPU s against 14.5 for 1M records
(docs/history/performance-issues-26-31.md). A plain append
run (no step needs Spark, `needs_spark_writer`) therefore writes its data files in its
read tasks: each task reads its ranges, decodes them with the table's decoder and writes
the good rows as the table's data files (Parquet with Iceberg's field ids and metrics, by
pyiceberg's writer); the table is then published on its own, exactly once
(pipeline/shared_run.py).

Small runs share one such job (many tables' ranges in few tasks); a run of more than
MAX_SHARED_TABLE_RECORDS records has a job of its own, its ranges spread over tasks as a
table's own run spreads them.

An upsert run of at most UPSERT_DRIVER_MAX_RECORDS records is such a run too: its read
tasks send the decoded records to the driver, which merges them into the table with
position deletes (pipeline/upsert_rows.py) instead of Spark's window, append and MERGE,
whose fixed cost (~25 Spark stages, the JIT, 4 commits) is most of a small batch's
(docs/history/performance-issues-26-31.md, "Upsert tables that grow"). A first load (a run
that creates its table) is one too up to FIRST_LOAD_DRIVER_MAX_RECORDS records: every key
is new, so its tasks write each key's latest record of their rows as an append's do, and
the driver reduces their keys over the tasks (pipeline/first_load.py). A larger run (a
backfill) runs Spark's MERGE; a larger first load, Spark's window and an append.

A checked append table is such a run too when its read tasks can judge its checks
(row-local ones, checks/arrow_checks.py) and its bad records go nowhere or to an Iceberg
dead-letter table with their raw bytes: the tasks count each check's failing rows and
build the dead-letter rows from the records they read; the driver judges the checks and
appends the dead letters before the publish. Its own Spark pipeline cost ~3.4-4.6 s a
refresh for a few hundred records (checks 1.2-1.8 s, dead letters 1.4-1.7 s: Spark jobs
and the records read again from Kafka; docs/production.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tableflow_core.checks.arrow_checks import read_task_refusal
from tableflow_core.config.models.dead_letter import IcebergDeadLetter
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.ingest.stages import Check, Decode, Publish, ReadRanges, RouteBadRecords, Write

# A run of more records has a job of its own (its data files still written by its tasks).
MAX_SHARED_TABLE_RECORDS = 100_000
# One shared job holds at most this many tables and records: a job's failure fails its
# tables' runs, and the next job's Spark work overlaps this one's publishes.
MAX_JOB_TABLES = 250
MAX_JOB_RECORDS = 1_000_000
# Policies of undecodable records a shared job applies without a dead-letter target.
SHARED_POLICIES = frozenset({"fail", "skip"})
# An upsert run of more records runs Spark's MERGE: the driver holds the run's records.
UPSERT_DRIVER_MAX_RECORDS = 250_000
# A first load (the run creates its table) of up to this many records is written by its
# read tasks, each key's latest record, and reduced over the tasks on the driver, no MERGE
# (pipeline/first_load.py): the driver holds each record's key and place (~40 bytes for
# an integer key: 400 MB at 10M). A larger one runs on Spark: a window, then an append
# (pipeline/runners/write_upsert.py).
FIRST_LOAD_DRIVER_MAX_RECORDS = 10_000_000


_PLAIN = [ReadRanges, Decode, RouteBadRecords, Write, Publish]
_CHECKED = [ReadRanges, Decode, Check, RouteBadRecords, Write, Publish]
_ON_SPARK = "transforms or checks run on Spark"


def _pipeline_on_spark(spec: IngestSpec) -> str | None:
    """Why the table's transforms or checks need Spark (None: it has none, or only
    checks its read tasks judge: an append table's row-local ones, checks/arrow_checks.py)."""
    stages = spec.run_stages()
    kinds = [type(stage) for stage in stages]
    if kinds not in (_PLAIN, _CHECKED):
        return _ON_SPARK
    if any(isinstance(s, Decode) and s.fused for s in stages):
        return _ON_SPARK
    compiled = spec.compiled
    if compiled is None:
        return None if kinds == _PLAIN else _ON_SPARK
    if compiled.transforms.steps:
        return _ON_SPARK
    if compiled.checks.checks and spec.mode != "append":
        return "an upsert table's checks run on Spark"
    return read_task_refusal(compiled.checks.checks, spec.decoded_schema)


def _dead_letters_on_spark(spec: IngestSpec) -> str | None:
    """Why the table's bad records need Spark to reach their target (None: none has one,
    or an append table's go to an Iceberg table with their raw bytes, which the driver
    appends)."""
    routes = [s for s in spec.run_stages() if isinstance(s, RouteBadRecords)]
    target = spec.dead_letter
    if target is None and all(r.on_error in SHARED_POLICIES for r in routes):
        return None
    if (
        isinstance(target, IcebergDeadLetter)
        and spec.dead_letter_payload == "raw"
        and spec.mode == "append"
    ):
        return None
    return "bad records go to a dead-letter target"


# Why a run needs Spark's writer, in the order they are reported (None: it does not).
_SPARK_WRITER_NEEDED: tuple[Callable[[IngestSpec], str | None], ...] = (
    _pipeline_on_spark,
    _dead_letters_on_spark,
    lambda spec: (
        "partitioned or sorted: Spark's Iceberg writer lays out its files"
        if spec.partition_by or spec.sort_by
        else None
    ),
)


def needs_spark_writer(spec: IngestSpec) -> str | None:
    """Why a run of this table needs a Spark job of its own with Spark's Iceberg writer;
    None when its read tasks can write its data files."""
    for why in _SPARK_WRITER_NEEDED:
        if (reason := why(spec)) is not None:
            return reason
    return None


def needs_spark_merge(spec: IngestSpec, records: int, first_load: bool = False) -> str | None:
    """Why an upsert run of `records` records runs on Spark (None: the driver merges it,
    or the table is not an upsert table). `first_load`: the run creates its table, so
    every key is new and the driver only reduces and appends."""
    if spec.mode != "upsert":
        return None
    if first_load:
        if records > FIRST_LOAD_DRIVER_MAX_RECORDS:
            return (
                f"upsert: a first load of more than {FIRST_LOAD_DRIVER_MAX_RECORDS:,} records "
                "runs on Spark (a window, then an append)"
            )
        return None
    if records > UPSERT_DRIVER_MAX_RECORDS:
        return f"upsert: more than {UPSERT_DRIVER_MAX_RECORDS:,} records run Spark's MERGE"
    return None


@dataclass(frozen=True)
class Candidate:
    """A table whose run writes its data files in its read tasks: its name and the
    records the run reads."""

    table: str
    records: int


def shared_jobs(candidates: Sequence[Candidate]) -> tuple[tuple[str, ...], ...]:
    """The candidates grouped into jobs, in table-name order: a run of more than
    MAX_SHARED_TABLE_RECORDS records alone, the others together within MAX_JOB_TABLES and
    MAX_JOB_RECORDS."""
    jobs: list[list[str]] = []
    shared: list[str] | None = None  # the job small runs are joining
    records = 0
    for candidate in sorted(candidates, key=lambda c: c.table):
        if candidate.records > MAX_SHARED_TABLE_RECORDS:
            jobs.append([candidate.table])
            continue
        full = shared is not None and (
            len(shared) >= MAX_JOB_TABLES or records + candidate.records > MAX_JOB_RECORDS
        )
        if shared is None or full:
            shared = []
            jobs.append(shared)
            records = 0
        shared.append(candidate.table)
        records += candidate.records
    return tuple(tuple(job) for job in jobs)
