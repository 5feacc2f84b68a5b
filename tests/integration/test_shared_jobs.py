"""Plain append runs whose read tasks write the data files: small tables sharing one Spark
job, a large run in a job of its own (ingest/sharing.py, pipeline/shared_run.py), with a
real broker, registry, catalog server and Spark, through plan + apply.

Every table is checked against an independent model (the records produced, minus the bad
ones), read back by pyiceberg and by DuckDB; offsets by the committed snapshot summary.
The crash tests run `tableflow apply` as its own process and SIGKILL it (its whole process
group: driver, JVM, Python workers) in the middle of the shared job's writes and between
two tables' publishes, then re-run: each table ends with every record exactly once.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Producer
from pyiceberg.exceptions import NoSuchTableError

from tableflow_core.config.loader import load_project
from tableflow_core.engine.run_branch import BRANCH_PREFIX
from tableflow_core.engine.spark_session import SessionStarter
from tableflow_core.ingest.sharing import MAX_SHARED_TABLE_RECORDS
from tableflow_core.readers.duckdb_reader import attach_rest_catalog, duckdb_connection
from tableflow_core.targets.catalog import open_catalog
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.apply_env import run_cli_apply
from tests.fixtures.catalog import CatalogServer, unique_namespace
from tests.fixtures.projects import StackProject
from tests.fixtures.stack import KafkaBroker, unique_name
from tests.unit.test_engine_helpers import avro_schema, frame, register

pytestmark = pytest.mark.slow

Row = tuple[int, str, float, int, int]  # id, name, amount, _kafka_partition, _kafka_offset
BAD = b"\x00\x00\x00\x00\x01not avro"


class Topic:
    """A 2-partition topic of Avro payments and the model of what it holds."""

    def __init__(self, broker: KafkaBroker, registry_url: str, label: str) -> None:
        self.name = broker.create_topic(unique_name(f"shared-{label}"), 2)
        self.bootstrap = broker.bootstrap
        self.schema_id = register(registry_url, f"{self.name}-value", avro_schema())
        self.parsed = fastavro.parse_schema(avro_schema())
        self.next_offset = {0: 0, 1: 0}
        self.good: list[Row] = []

    def produce(
        self, count: int, first_id: int, bad_at: tuple[int, ...] = (), null_at: tuple[int, ...] = ()
    ) -> None:
        """`count` records (ids from `first_id`) over both partitions; the n-th record of
        `bad_at` is not Avro (a bad record), of `null_at` has a null value (a tombstone)."""
        producer = Producer({"bootstrap.servers": self.bootstrap})
        for n in range(count):
            partition, record_id = n % 2, first_id + n
            offset = self.next_offset[partition]
            self.next_offset[partition] += 1
            payload: bytes | None
            if n in bad_at:
                payload = BAD
            elif n in null_at:
                payload = None
            else:
                record = {"id": record_id, "name": f"n{record_id}", "amount": record_id / 4}
                payload = frame(self.schema_id, self.parsed, record)
                self.good.append((record_id, record["name"], record["amount"], partition, offset))
            try:
                producer.produce(self.name, payload, partition=partition)
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.flush(30)
                producer.produce(self.name, payload, partition=partition)
        producer.flush(30)


@dataclass
class Project:
    """A project of one table per topic (`<label>`), all small enough to share a job."""

    root: Path
    namespace: str
    catalog: CatalogServer
    topics: dict[str, Topic]

    @property
    def project(self) -> Any:
        return load_project(self.root)

    def rows(self, table: str) -> list[Row]:
        """The table's rows by pyiceberg; DuckDB (through the catalog) must read the same."""
        columns = ["id", "name", "amount", "_kafka_partition", "_kafka_offset"]
        loaded = self.catalog.pyiceberg_catalog().load_table(f"{self.namespace}.{table}")
        by_pyiceberg = sorted(
            tuple(r[c] for c in columns) for r in loaded.scan().to_arrow().to_pylist()
        )
        with open_catalog(self.project) as handle:
            props = handle.spark_properties
            con = duckdb_connection()
            attach_rest_catalog(con, handle.spark_name, props["uri"], props.get("credential"))
            by_duckdb = sorted(
                con.sql(
                    f"SELECT {', '.join(columns)} FROM {handle.spark_name}.{self.namespace}.{table}"
                ).fetchall()
            )
        assert by_duckdb == by_pyiceberg, table
        return by_pyiceberg  # type: ignore[return-value]

    def offsets(self, table: str) -> dict[str, int]:
        loaded = self.catalog.pyiceberg_catalog().load_table(f"{self.namespace}.{table}")
        head = loaded.current_snapshot()
        found = head.summary.get("tableflow.offsets") if head and head.summary else None
        return dict(json.loads(found)["offsets"]) if found else {}

    def branches(self, table: str) -> list[str]:
        loaded = self.catalog.pyiceberg_catalog().load_table(f"{self.namespace}.{table}")
        return sorted(name for name in loaded.metadata.refs if name != "main")

    def commits(self, table: str) -> int:
        """Catalog commits of the table so far: one metadata file each (the metadata log)."""
        loaded = self.catalog.pyiceberg_catalog().load_table(f"{self.namespace}.{table}")
        return len(loaded.metadata.metadata_log)

    def check_exactly_once(self, table: str) -> None:
        """The table holds every good record of its topic once, with the offsets read."""
        topic = self.topics[table]
        assert self.rows(table) == sorted(topic.good), table
        assert self.offsets(table) == {str(p): o for p, o in topic.next_offset.items() if o}


LABELS = ("a", "b", "c", "d", "e")


@pytest.fixture
def shared_project(
    stack_project: StackProject,
    catalog_server: CatalogServer,
    kafka_broker: KafkaBroker,
    schema_registry: Any,
) -> Project:
    topics = {label: Topic(kafka_broker, schema_registry.url, label) for label in LABELS}
    namespace = unique_namespace("shared")
    tables: list[dict[str, Any]] = [
        {"name": label, "topic": topic.name, "metadata_columns": ["partition", "offset"]}
        for label, topic in topics.items()
    ]
    tables[2]["on_error"] = "skip"  # `c` skips its bad records, in the shared job
    name = unique_name("shared").replace("-", "_")
    root = stack_project(namespace=namespace, tables=tables, name=name)
    return Project(root, namespace, catalog_server, topics)


def produce_round(project: Project, first_id: int) -> None:
    for i, (label, topic) in enumerate(project.topics.items()):
        bad = (3,) if label == "c" else ()
        topic.produce(5 + 7 * i, first_id + 1000 * i, bad_at=bad)


def plan_and_apply(spark: Any, project: Project) -> dict[str, Any]:
    loaded = project.project
    plan = PlanTask(loaded, loaded.tables).run()
    assert not plan.blockers, plan.blockers
    shared = [t for t in plan.dag.tasks if t.kind == "ingest_shared"]
    ingests = [a for a in plan.actions if a.kind == "ingest"]
    if len(ingests) >= 2:  # every table's run in the one shared job
        assert len(shared) == 1
        assert {m.table for m in shared[0].members} == {a.table for a in ingests}
        assert not [t for t in plan.dag.tasks if t.kind == "ingest"]
    results = ApplyTask(loaded, plan, spark=spark).run()
    return {t.table: t for t in results.tables}


def test_shared_job_writes_each_table_exactly_once(spark: Any, shared_project: Project) -> None:
    project = shared_project
    produce_round(project, 0)
    first = plan_and_apply(spark, project)
    for label in LABELS:
        result = first[label]
        assert result.status == "success", result
        assert "shared_job" in (result.timings or {}), result.timings
        project.check_exactly_once(label)
        assert project.branches(label) == []
    assert first["c"].records_read == 19 and first["c"].records_written == 18
    assert first["c"].records_skipped == 1

    # A crashed run's branch behind main: the next publish removes it, in its one commit.
    table_a = project.catalog.pyiceberg_catalog().load_table(f"{project.namespace}.a")
    head = table_a.current_snapshot()
    assert head is not None and head.parent_snapshot_id is not None
    with table_a.manage_snapshots() as refs:
        refs.create_branch(head.parent_snapshot_id, "tableflow_run_crashed")
    assert project.branches("a") == ["tableflow_run_crashed"]
    commits_before = {label: project.commits(label) for label in LABELS}
    produce_round(project, 100)
    second = plan_and_apply(spark, project)
    assert all(second[label].status == "success" for label in LABELS)
    for label in LABELS:
        project.check_exactly_once(label)
        # An existing table's run: the branch cut, the files added, main moved, the
        # branch (and a stale one) removed, in one catalog commit.
        assert project.commits(label) - commits_before[label] == 1, label
        assert project.branches(label) == [], label
    assert all(r.status == "no_changes" for r in plan_and_apply(spark, project).values())


def test_tables_are_created_and_runs_begun_before_spark_is_ready(
    spark: Any, shared_project: Project
) -> None:
    """On a REST catalog, apply creates the namespace and tables through the catalog and
    begins each table's run (its first snapshot and branch) without the Spark
    application: the application only comes once all of that is in the catalog, and the
    tables still end exactly once."""
    project = shared_project
    produce_round(project, 0)
    catalog = project.catalog.pyiceberg_catalog()
    seen: list[str] = []

    def begun(label: str) -> bool:
        try:
            loaded = catalog.load_table(f"{project.namespace}.{label}")
        except NoSuchTableError:
            return False
        return any(name.startswith(BRANCH_PREFIX) for name in loaded.metadata.refs)

    def spark_once_every_run_began() -> Any:
        deadline = time.monotonic() + 120
        while not all(begun(label) for label in LABELS):
            assert time.monotonic() < deadline, "the runs waited for Spark to begin"
            time.sleep(0.1)
        seen.extend(LABELS)
        return spark

    loaded = project.project
    plan = PlanTask(loaded, loaded.tables).run()
    starter = SessionStarter(spark_once_every_run_began, start=False)
    results = ApplyTask(loaded, plan, spark_starter=starter).run()
    assert seen == list(LABELS)
    assert all(t.status == "success" for t in results.tables), results.tables
    for label in LABELS:
        project.check_exactly_once(label)
        assert project.branches(label) == []


def test_shared_job_fail_policy_fails_its_table_only(spark: Any, shared_project: Project) -> None:
    """A bad record in a `fail` table stops that table's run, named by offset; the job's
    other tables commit."""
    project = shared_project
    produce_round(project, 0)
    project.topics["a"].produce(2, 500, bad_at=(1,))  # `a` fails on error
    project.topics["a"].good = []  # the model: `a` keeps nothing of this run
    results = plan_and_apply(spark, project)
    failed = results["a"]
    assert failed.status == "error"
    topic_a = project.topics["a"].name
    assert f"topic {topic_a!r} partition 1 offset 2" in (failed.error or ""), failed.error
    assert project.rows("a") == [] and project.offsets("a") == {}
    assert project.branches("a") == []
    for label in LABELS[1:]:
        assert results[label].status == "success"
        project.check_exactly_once(label)


def test_null_values_in_a_shared_job_are_tombstones_not_rows(
    spark: Any, shared_project: Project
) -> None:
    """Null values on an append table (issue #27) are counted as tombstones and warned
    about, never written (the decoder hands them on as rows of NULLs), in a shared job
    as in a table's own run."""
    project = shared_project
    produce_round(project, 0)
    project.topics["b"].produce(6, 700, null_at=(0, 3, 4))
    results = plan_and_apply(spark, project)
    b = results["b"]
    assert b.status == "success" and "shared_job" in (b.timings or {}), b
    project.check_exactly_once("b")  # no row of NULLs
    assert b.accounting is not None
    totals = b.accounting["totals"]
    assert (totals["read"], totals["written"], totals["tombstones"], totals["filtered"]) == (
        18, 15, 3, 0,
    )  # fmt: skip
    assert any("3 null-value record(s) (tombstones) not written" in w for w in b.warnings)
    for label in ("a", "c", "d", "e"):
        project.check_exactly_once(label)


def data_files_on_disk(project: Project, table: str) -> set[str]:
    loaded = project.catalog.pyiceberg_catalog().load_table(f"{project.namespace}.{table}")
    data = Path(loaded.location().removeprefix("file://")) / "data"
    return {str(p) for p in data.rglob("*.parquet")}


def test_kill_9_mid_shared_job_then_rerun_is_exactly_once(
    spark: Any, shared_project: Project
) -> None:
    project = shared_project
    produce_round(project, 0)
    assert all(r.status == "success" for r in plan_and_apply(spark, project).values())
    produce_round(project, 100)
    committed = {label: project.rows(label) for label in LABELS}
    files_before = {label: data_files_on_disk(project, label) for label in LABELS}

    # 1. the whole process group killed inside the shared job, after a table's data files
    #    were written: no table's publish happened, so no table changed.
    run_cli_apply(project, crash_at="shared_mid_write")
    orphans = {label: data_files_on_disk(project, label) - files_before[label] for label in LABELS}
    assert any(orphans.values()), "the kill came before any data file was written"
    for label in LABELS:
        assert project.rows(label) == committed[label], label

    # 2. killed right after the first table's publish: each table is either as before the
    #    run or holds exactly its new records, nothing in between.
    run_cli_apply(project, crash_at="shared_after_publish")
    moved = []
    for label in LABELS:
        rows = project.rows(label)
        if rows != committed[label]:
            project.check_exactly_once(label)
            moved.append(label)
    assert len(moved) >= 1

    # 3. the re-run: every table exactly once, no run branch left, no orphan file read.
    results = plan_and_apply(spark, project)
    for label in LABELS:
        assert results[label].status in ("success", "no_changes"), results[label]
        project.check_exactly_once(label)
        assert project.branches(label) == []
    for label in moved:
        assert results[label].status == "no_changes"


def test_a_large_run_has_a_job_of_its_own_spread_over_tasks_exactly_once(
    spark: Any,
    stack_project: StackProject,
    catalog_server: CatalogServer,
    kafka_broker: KafkaBroker,
    schema_registry: Any,
) -> None:
    """A plain append run of more than MAX_SHARED_TABLE_RECORDS records: its read tasks
    (one per partition) write its data files, in a job of its own; killed after a task
    wrote its files, then re-run: every record exactly once."""
    topic = Topic(kafka_broker, schema_registry.url, "large")
    namespace = unique_namespace("large")
    table = {"name": "large", "topic": topic.name, "metadata_columns": ["partition", "offset"]}
    root = stack_project(
        namespace=namespace, tables=[table], name=unique_name("large").replace("-", "_")
    )
    project = Project(root, namespace, catalog_server, {"large": topic})
    topic.produce(MAX_SHARED_TABLE_RECORDS + 2, 0)

    loaded = project.project
    plan = PlanTask(loaded, loaded.tables).run()
    (job,) = [t for t in plan.dag.tasks if t.kind == "ingest_shared"]
    assert [m.table for m in job.members] == ["large"]

    run_cli_apply(project, crash_at="shared_mid_write")
    loaded_table = catalog_server.pyiceberg_catalog().load_table(f"{namespace}.large")
    assert loaded_table.scan().to_arrow().num_rows == 0  # a task's files are orphans
    assert data_files_on_disk(project, "large"), "the kill came before any data file"

    run_cli_apply(project, crash_at=None)
    project.check_exactly_once("large")
    assert project.branches("large") == []
    head = catalog_server.pyiceberg_catalog().load_table(f"{namespace}.large")
    published = {f.file.file_path for f in head.scan().plan_files()}
    assert len(published) == 2  # one data file per read task (partition)
