"""Which tables' runs share one Spark job (pure: `plan` decides, apply runs what it says).

A table's run on its own costs a Spark job that reads and writes, and the Iceberg Spark
writer's commit: ~130 ms of JVM CPU for a table of 200 records (measured with a flight
recording: query planning, code generation, class loading, the Parquet and manifest
writers; docs/performance.md). A project of 1,000 small tables paid that 1,000 times.

Small append tables share one job instead: its read tasks read every table's ranges,
decode each with its table's decoder and write the table's data files there (Parquet with
Iceberg's field ids and metrics, by pyiceberg's writer); each table is then published on
its own, exactly once (pipeline/shared_run.py). A run keeps a job of its own when it is
large (its own tasks and Spark's Iceberg writer suit it), or when a step needs Spark
(`alone_because`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.ingest.stages import Decode, Publish, ReadRanges, RouteBadRecords, Write

# A run of more records keeps a job of its own.
MAX_TABLE_RECORDS = 100_000
# One shared job holds at most this many tables and records: a job's failure fails its
# tables' runs, and the next job's Spark work overlaps this one's publishes.
MAX_JOB_TABLES = 250
MAX_JOB_RECORDS = 1_000_000
# Fewer tables than this to share with: each keeps its own job, as before.
MIN_JOB_TABLES = 2

SHARED_POLICIES = frozenset({"fail", "skip"})


def _stages_of_a_plain_append(spec: IngestSpec) -> bool:
    kinds = [type(stage) for stage in spec.run_stages()]
    if kinds != [ReadRanges, Decode, RouteBadRecords, Write, Publish]:
        return False
    decode = next(s for s in spec.run_stages() if isinstance(s, Decode))
    return not decode.fused


# (why a run keeps its own job, when it applies), in the order they are reported.
_ALONE: tuple[tuple[str, Callable[[IngestSpec, int], bool]], ...] = (
    ("upsert: a MERGE by key", lambda spec, _n: spec.mode != "append"),
    (
        "transforms or checks run on Spark",
        lambda spec, _n: spec.compiled is not None or not _stages_of_a_plain_append(spec),
    ),
    (
        "bad records go to a dead-letter target",
        lambda spec, _n: (
            spec.dead_letter is not None
            or any(
                isinstance(s, RouteBadRecords) and s.on_error not in SHARED_POLICIES
                for s in spec.run_stages()
            )
        ),
    ),
    (
        "partitioned or sorted: Spark's Iceberg writer lays out its files",
        lambda spec, _n: bool(spec.partition_by or spec.sort_by),
    ),
    (f"more than {MAX_TABLE_RECORDS:,} records", lambda _spec, n: n > MAX_TABLE_RECORDS),
)


def alone_because(spec: IngestSpec, records: int) -> str | None:
    """Why a run of `records` records of this table keeps a Spark job of its own; None
    when it can share one."""
    for reason, applies in _ALONE:
        if applies(spec, records):
            return reason
    return None


@dataclass(frozen=True)
class Candidate:
    """A table whose run can share a job: its name and the records the run reads."""

    table: str
    records: int


def shared_jobs(candidates: Sequence[Candidate]) -> tuple[tuple[str, ...], ...]:
    """The candidates grouped into jobs, in table-name order, each within MAX_JOB_TABLES
    and MAX_JOB_RECORDS; none when fewer than MIN_JOB_TABLES can share."""
    if len(candidates) < MIN_JOB_TABLES:
        return ()
    jobs: list[list[str]] = []
    records = 0
    for candidate in sorted(candidates, key=lambda c: c.table):
        full = jobs and (
            len(jobs[-1]) >= MAX_JOB_TABLES or records + candidate.records > MAX_JOB_RECORDS
        )
        if not jobs or full:
            jobs.append([])
            records = 0
        jobs[-1].append(candidate.table)
        records += candidate.records
    return tuple(tuple(job) for job in jobs)
