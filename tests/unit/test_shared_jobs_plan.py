"""Which small tables share a Spark job (ingest/sharing.py), and how the DAG executor runs
a shared task for the members whose own dependencies succeeded (no process at all)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tableflow_core.ingest.sharing import (
    MAX_JOB_RECORDS,
    MAX_JOB_TABLES,
    MAX_TABLE_RECORDS,
    Candidate,
    alone_because,
    shared_jobs,
)
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.ingest.terms import PartitionTerm
from tableflow_core.plan.dag import Dag, DagMember, DagTask
from tableflow_core.runner.executor import execute_dag
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


def test_a_small_plain_append_table_can_share() -> None:
    assert alone_because(spec(), 200) is None
    assert alone_because(spec(), MAX_TABLE_RECORDS) is None


@pytest.mark.parametrize(
    ("overrides", "records", "reason"),
    [
        ({"mode": "upsert", "key_columns": ("id",)}, 10, "upsert"),
        ({"partition_by": (PartitionTerm(column="id"),)}, 10, "partitioned"),
        ({}, MAX_TABLE_RECORDS + 1, "more than"),
    ],
)
def test_what_keeps_a_table_in_a_job_of_its_own(
    overrides: dict[str, object], records: int, reason: str
) -> None:
    found = alone_because(spec(**overrides), records)
    assert found is not None and reason in found


def test_jobs_group_tables_by_name_within_the_limits() -> None:
    assert shared_jobs([Candidate("only", 5)]) == ()
    many = [Candidate(f"t{i:04d}", 10) for i in range(MAX_JOB_TABLES + 3)]
    jobs = shared_jobs(list(reversed(many)))
    assert [len(j) for j in jobs] == [MAX_JOB_TABLES, 3]
    assert [t for j in jobs for t in j] == sorted(c.table for c in many)
    heavy = [Candidate(f"h{i}", MAX_JOB_RECORDS // 2) for i in range(5)]
    assert [len(j) for j in shared_jobs(heavy)] == [2, 2, 1]


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
