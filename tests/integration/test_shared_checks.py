"""Checked append tables in the shared job (checks/arrow_checks.py, pipeline/shared_tasks.py)
against the same checks on Spark, with a real broker, registry, catalog and Spark, through
plan + apply.

Three tables read one Avro topic whose records break the checks in every way the two
engines could judge differently (NULLs, NaN, a float32 just above its bound, values out
of range and not accepted, undecodable records, null values): `arrow` shares the job;
`spark` has the same checks plus one only Spark judges, so its own pipeline runs them;
`strict` fails its run on an out-of-range quantity. After each of two applies, `arrow`
and `spark` hold the same rows, dead-letter the same records with the same bytes, key,
headers and reason, count the same, and report the same verdict per check; all of it
equal to an independent model of the records produced. `strict` publishes nothing and
names the failing check; `arrow` is not held back by it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Producer
from rich.console import Console

from tableflow_core.config.loader import load_project
from tableflow_core.plan.render_human import render_human
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.catalog import CatalogServer, unique_namespace
from tests.fixtures.projects import StackProject
from tests.fixtures.stack import KafkaBroker, unique_name
from tests.unit.test_engine_helpers import frame, register

pytestmark = pytest.mark.slow

SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "tableflow.test",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": ["null", "int"], "default": None},
        {"name": "price", "type": ["null", "double"], "default": None},
        {"name": "ratio", "type": "float"},
        {"name": "status", "type": ["null", "string"], "default": None},
        {"name": "flag", "type": ["null", "boolean"], "default": None},
    ],
}
BAD = b"\x00\x00\x00\x00\x01not avro"
STATUSES = ("new", "paid", "shipped")
CHECKS: list[dict[str, Any]] = [
    {"type": "not_null", "columns": ["qty"], "on_failure": "dlq"},
    {"type": "range", "column": "qty", "min": 0, "max": 94, "on_failure": "dlq"},
    {"type": "range", "column": "price", "max": 100.0, "on_failure": "skip"},
    {"type": "range", "column": "ratio", "max": 0.1, "severity": "warn"},
    {"type": "accepted_values", "column": "status", "values": list(STATUSES), "on_failure": "skip"},
    {"type": "accepted_values", "column": "flag", "values": [True], "severity": "warn"},
    {"type": "row_count", "min": 1, "severity": "warn"},
]
# Passes on every row, and only Spark judges it: the `spark` table runs its own pipeline.
SPARK_ONLY = {"type": "expression", "name": "id_known", "expression": "id >= 0"}


def record(n: int) -> dict[str, Any]:
    qty = None if n % 10 == 3 else 95 + n % 5 if n % 7 == 0 else -1 if n % 11 == 0 else n % 90
    price = (
        math.nan if n % 13 == 0 else 150.0 if n % 17 == 0 else None if n % 19 == 0 else n % 100 / 2
    )
    status = "lost" if n % 5 == 0 else None if n % 8 == 0 else STATUSES[n % 3]
    flag = None if n % 4 == 0 else n % 3 != 0
    return {"id": n, "qty": qty, "price": price, "ratio": 0.1 if n % 6 == 0 else 0.05,
            "status": status, "flag": flag}  # fmt: skip


def fate(n: int) -> tuple[str, str | None]:
    """Where record `n` goes, by the model: (fate, the check taking it out)."""
    if n % 23 == 22:
        return "bad", None
    if n % 29 == 28:
        return "null", None
    r = record(n)
    if r["qty"] is None:
        return "dlq", "not_null(qty)"
    if not 0 <= r["qty"] <= 94:
        return "dlq", "range(qty)"
    price = r["price"]
    if price is not None and (math.isnan(price) or price > 100.0):
        return "skip", None
    if r["status"] is not None and r["status"] not in STATUSES:
        return "skip", None
    return "written", None


@dataclass
class Topic:
    name: str
    bootstrap: str
    schema_id: int
    produced: int = 0

    def produce(self, count: int) -> None:
        parsed = fastavro.parse_schema(SCHEMA)
        producer = Producer({"bootstrap.servers": self.bootstrap})
        for n in range(self.produced, self.produced + count):
            kind, _ = fate(n)
            value = (
                BAD if kind == "bad" else None if kind == "null" else frame(
                    self.schema_id, parsed, record(n)
                )
            )  # fmt: skip
            # Record n at partition n % 2, offset n // 2: the model finds it by position.
            producer.produce(
                self.name, value, key=f"k{n}".encode(), partition=n % 2,
                headers=[("origin", f"h{n}".encode())],
            )  # fmt: skip
        producer.flush(30)
        self.produced += count


@dataclass
class Project:
    root: Path
    namespace: str
    catalog: CatalogServer
    topic: Topic

    def table(self, name: str) -> Any:
        return self.catalog.pyiceberg_catalog().load_table(f"{self.namespace}.{name}")

    def ids(self, name: str) -> list[int]:
        rows = self.table(name).scan(selected_fields=("id",)).to_arrow()
        return sorted(rows.column("id").to_pylist())

    def dead_letters(self, name: str) -> list[tuple[Any, ...]]:
        """The dead-letter rows, without the run's id and the moment they were written."""
        columns = ["source_topic", "source_partition", "source_offset", "source_timestamp",
                   "key", "value", "headers", "stage", "error_class", "error_message"]  # fmt: skip
        rows = self.table(name).scan().to_arrow().select(columns).to_pylist()
        return sorted(tuple(str(r[c]) for c in columns) for r in rows)


@pytest.fixture
def checked_project(
    stack_project: StackProject,
    catalog_server: CatalogServer,
    kafka_broker: KafkaBroker,
    schema_registry: Any,
) -> Project:
    name = kafka_broker.create_topic(unique_name("checked"), 2)
    topic = Topic(
        name, kafka_broker.bootstrap, register(schema_registry.url, f"{name}-value", SCHEMA)
    )
    namespace = unique_namespace("checked")

    def table(label: str, checks: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
        return {"name": label, "topic": name, "metadata_columns": ["partition", "offset"],
                "checks": checks, **more}  # fmt: skip

    tables = [
        table("arrow", CHECKS, on_error="dlq",
              dlq={"type": "iceberg", "table": f"{namespace}.dlq_arrow"}),
        table("spark", [*CHECKS, SPARK_ONLY], on_error="dlq",
              dlq={"type": "iceberg", "table": f"{namespace}.dlq_spark"}),
        table("strict", [{"type": "range", "column": "qty", "max": 94, "on_failure": "fail"}],
              on_error="skip"),
    ]  # fmt: skip
    root = stack_project(
        namespace=namespace, tables=tables, name=unique_name("checked").replace("-", "_")
    )
    return Project(root, namespace, catalog_server, topic)


def plan_and_apply(spark: Any, project: Project) -> dict[str, Any]:
    loaded = load_project(project.root)
    plan = PlanTask(loaded, loaded.tables).run()
    assert not plan.blockers, plan.blockers
    shared = [t for t in plan.dag.tasks if t.kind == "ingest_shared"]
    assert [sorted(m.table for m in t.members) for t in shared] == [["arrow", "strict"]]
    assert [t.table for t in plan.dag.tasks if t.kind == "ingest"] == ["spark"]
    console = Console(record=True, width=200)
    render_human(plan, console)
    shown = console.export_text()
    assert "own Spark pipeline: check id_known: expression checks run on Spark" in shown
    assert shown.count("shared Spark job ingest_shared") == 2  # arrow and strict
    results = ApplyTask(loaded, plan, spark=spark).run()
    return {t.table: t for t in results.tables}


def by_check(result: Any) -> dict[str, tuple[Any, ...]]:
    return {
        c["name"]: (c["outcome"], c["action"], c["failing"], c["observed"], c["rows_evaluated"])
        for c in result.checks["checks"]
    }


def expect(records: range) -> dict[str, Any]:
    """The model's figures for `records` (by number)."""
    fates = {n: fate(n) for n in records}
    checked = [n for n, (kind, _) in fates.items() if kind not in ("bad", "null")]
    qty = [record(n)["qty"] for n in checked]
    return {
        "written": sorted(n for n, (kind, _) in fates.items() if kind == "written"),
        "dead": sorted(
            (n % 2, n // 2, "check" if why else "decode", why)
            for n, (kind, why) in fates.items()
            if kind in ("dlq", "bad")
        ),
        "skipped": sum(1 for kind, _ in fates.values() if kind == "skip"),
        "checked": len(checked),
        "qty_null": sum(1 for q in qty if q is None),
        "qty_out": sum(1 for q in qty if q is not None and not 0 <= q <= 94),
    }


def test_checks_judged_by_the_read_tasks_agree_with_spark_and_the_model(
    spark: Any, checked_project: Project
) -> None:
    project, topic = checked_project, checked_project.topic
    for count in (300, 200):  # two applies: a new table's run, then an existing one's
        first = topic.produced
        topic.produce(count)
        results = plan_and_apply(spark, project)
        model, run = expect(range(topic.produced)), expect(range(first, topic.produced))
        arrow, on_spark = results["arrow"], results["spark"]
        assert arrow.status == on_spark.status == "success", (arrow.error, on_spark.error)
        assert project.ids("arrow") == project.ids("spark") == model["written"]
        assert project.dead_letters("dlq_arrow") == project.dead_letters("dlq_spark")
        dead = [
            (int(r[1]), int(r[2]), r[7], r[9]) for r in project.dead_letters("dlq_arrow")
        ]  # partition, offset, stage, message
        assert sorted(
            (p, o, stage, message.removeprefix("check ").removesuffix(" failed") if stage == "check" else None)
            for p, o, stage, message in dead
        ) == model["dead"]  # fmt: skip
        for row in project.dead_letters("dlq_arrow"):  # the original record's bytes
            n = 2 * int(row[2]) + int(row[1])
            assert row[4] == str(f"k{n}".encode()) and f"h{n}" in row[6], row

        for figure in (
            "records_read",
            "records_written",
            "records_skipped",
            "records_dead_lettered",
        ):
            assert getattr(arrow, figure) == getattr(on_spark, figure), figure
        assert arrow.records_written == len(run["written"])
        assert arrow.records_dead_lettered == len(run["dead"])
        assert arrow.records_skipped == run["skipped"]
        assert arrow.accounting["totals"] == on_spark.accounting["totals"]

        shared_checks, spark_checks = by_check(arrow), by_check(on_spark)
        assert spark_checks.pop("id_known")[0] == "pass"
        assert shared_checks == spark_checks
        assert shared_checks["not_null(qty)"][2] == run["qty_null"]
        assert shared_checks["range(qty)"][2] == run["qty_out"]
        assert shared_checks["range(ratio)"][:2] == ("warn", "none")
        assert shared_checks["range(price)"][:2] == ("warn", "skipped")
        assert {c[4] for c in shared_checks.values() if c[4] is not None} == {run["checked"]}
        assert (arrow.checks["engine"], on_spark.checks["engine"]) == ("arrow", "spark")
        for key in ("outcome", "rows_evaluated", "rows_skipped", "rows_dead_lettered"):
            assert arrow.checks[key] == on_spark.checks[key], key
        samples = {c["name"]: c["samples"] for c in arrow.checks["checks"]}
        assert all(s["qty"] is None for s in samples["not_null(qty)"])
        assert samples["range(qty)"] and all("kafka_offset" in s for s in samples["range(qty)"])
        assert any("range(ratio)" in w for w in arrow.warnings)

        strict = results["strict"]
        assert strict.status == "error" and "range(qty)" in (strict.error or "")
        assert "nothing was published" in (strict.error or "")
        assert strict.checks is not None and strict.checks["outcome"] == "fail"
        assert project.table("strict").current_snapshot() is None or project.ids("strict") == []
