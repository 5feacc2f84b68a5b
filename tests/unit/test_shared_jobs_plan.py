"""Which runs write their data files in their read tasks and which of them share a Spark
job (ingest/sharing.py), and how the DAG executor runs a shared task for the members whose
own dependencies succeeded (no process at all)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from rich.console import Console

from tableflow_core.ingest.sharing import (
    FIRST_LOAD_DRIVER_MAX_RECORDS,
    MAX_JOB_RECORDS,
    MAX_JOB_TABLES,
    MAX_SHARED_TABLE_RECORDS,
    UPSERT_DRIVER_MAX_RECORDS,
    Candidate,
    needs_spark_merge,
    needs_spark_writer,
    shared_jobs,
)
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.ingest.terms import PartitionTerm, SortTerm
from tableflow_core.plan.dag import Dag, DagMember, DagTask
from tableflow_core.runner.executor import TaskOutcome, execute_dag
from tableflow_core.runner.progress import ApplyProgress, failed_members
from tableflow_core.schemas.formats import FormatSpec


def spec(**overrides: object) -> IngestSpec:
    fields: dict[str, object] = {
        "table_name": "orders",
        "namespace": ("shop",),
        "table": "orders",
        "topic": "orders",
        "value": FormatSpec(format="avro"),
        "decoded_schema": pa.schema([pa.field("id", pa.int64())]),
    }
    return IngestSpec(**{**fields, **overrides})  # type: ignore[arg-type]


def test_a_plain_append_table_is_written_by_its_read_tasks() -> None:
    assert needs_spark_writer(spec()) is None


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"mode": "upsert", "key_columns": ("id",), "sort_by": (SortTerm(column="id"),)}, "sorted"),
        ({"partition_by": (PartitionTerm(column="id"),)}, "partitioned"),
    ],
)
def test_what_needs_spark_writer(overrides: dict[str, object], reason: str) -> None:
    found = needs_spark_writer(spec(**overrides))
    assert found is not None and reason in found


def test_a_small_upsert_run_is_merged_on_the_driver_a_large_one_by_spark() -> None:
    upsert = spec(mode="upsert", key_columns=("id",))
    assert needs_spark_writer(upsert) is None
    assert needs_spark_merge(upsert, UPSERT_DRIVER_MAX_RECORDS) is None
    reason = needs_spark_merge(upsert, UPSERT_DRIVER_MAX_RECORDS + 1)
    assert reason is not None and "MERGE" in reason
    assert needs_spark_merge(spec(), UPSERT_DRIVER_MAX_RECORDS + 1) is None  # append


def test_a_first_load_is_reduced_on_the_driver_up_to_its_own_limit() -> None:
    upsert = spec(mode="upsert", key_columns=("id",))
    assert needs_spark_merge(upsert, FIRST_LOAD_DRIVER_MAX_RECORDS, first_load=True) is None
    reason = needs_spark_merge(upsert, FIRST_LOAD_DRIVER_MAX_RECORDS + 1, first_load=True)
    assert reason is not None and "first load" in reason and "append" in reason


def test_a_large_run_has_a_job_of_its_own_and_a_lone_small_one_a_job_too() -> None:
    assert shared_jobs([Candidate("only", 5)]) == (("only",),)
    large = Candidate("b_large", MAX_SHARED_TABLE_RECORDS + 1)
    small = [Candidate(name, 10) for name in ("a", "c", "d")]
    assert shared_jobs([*small, large]) == (("a", "c", "d"), ("b_large",))
    assert shared_jobs([Candidate("x", MAX_SHARED_TABLE_RECORDS)]) == (("x",),)


def test_jobs_group_tables_by_name_within_the_limits() -> None:
    many = [Candidate(f"t{i:04d}", 10) for i in range(MAX_JOB_TABLES + 3)]
    jobs = shared_jobs(list(reversed(many)))
    assert [len(j) for j in jobs] == [MAX_JOB_TABLES, 3]
    assert [t for j in jobs for t in j] == sorted(c.table for c in many)
    per_job = MAX_JOB_RECORDS // MAX_SHARED_TABLE_RECORDS
    heavy = [Candidate(f"h{i:02d}", MAX_SHARED_TABLE_RECORDS) for i in range(2 * per_job + 1)]
    assert [len(j) for j in shared_jobs(heavy)] == [per_job, per_job, 1]


def test_a_shared_task_runs_for_the_members_whose_ddl_succeeded() -> None:
    members = tuple(
        DagMember(table=t, action=f"ingest:{t}", depends_on=(f"ddl:{t}",)) for t in "abc"
    )
    tasks = [DagTask(id=f"ddl:{t}", kind="ddl", table=t) for t in "abc"]
    shared = DagTask(
        id="ingest_shared:1",
        kind="ingest_shared",
        depends_on=tuple(f"ddl:{t}" for t in "abc"),
        actions=tuple(m.action for m in members),
        members=members,
    )
    ran: dict[str, tuple[str, ...]] = {}

    def run(task: DagTask) -> object:
        if task.id == "ddl:b":
            raise RuntimeError("catalog refused")
        ran[task.id] = task.actions
        return None

    outcomes = execute_dag(Dag(tasks=(*tasks, shared)), run)
    assert outcomes["ddl:b"].status == "error"
    assert outcomes["ingest_shared:1"].status == "success"
    assert ran["ingest_shared:1"] == ("ingest:a", "ingest:c")

    def every_ddl_fails(task: DagTask) -> object:
        if task.kind == "ddl":
            raise RuntimeError("catalog down")
        raise AssertionError("the shared task must not run")

    outcomes = execute_dag(Dag(tasks=(*tasks, shared)), every_ddl_fails)
    assert outcomes["ingest_shared:1"].status == "skipped"


def test_a_job_whose_table_failed_is_not_shown_as_a_success() -> None:
    members = tuple(DagMember(table=t, action=f"ingest:{t}") for t in ("a", "b"))
    task = DagTask(id="ingest_shared:1", kind="ingest_shared", members=members)
    value = {"a": object(), "b": RuntimeError("the object store refused")}
    outcome = TaskOutcome("ingest_shared:1", "success", value, duration_s=1.0)
    assert failed_members(task, outcome) == ["b"]
    assert failed_members(task, TaskOutcome("ingest_shared:1", "success", {"a": 1})) == []

    console = Console(record=True, width=200)
    with ApplyProgress(console, 1) as progress:
        progress.on_event("end", task, outcome)
    line = console.export_text()
    assert "error ingest_shared:1" in line and "1 of 2 table(s) failed (b)" in line, line
