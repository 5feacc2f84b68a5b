"""`tableflow status` after a real apply (broker, registry, catalog server, Spark)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from click.testing import CliRunner

from tableflow_core.cli.main import cli
from tableflow_core.config.loader import load_project
from tableflow_core.delta import sync_delta_log
from tableflow_core.dev.producer import produce_sample
from tableflow_core.ingest.bad_records import BAD_RECORD_SCHEMA
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.stack import unique_name

pytestmark = pytest.mark.slow


def _bad_rows(topic: str, stages: list[str]) -> pa.Table:
    now = datetime.now(tz=UTC)
    n = len(stages)
    return pa.table(
        {
            "source_topic": [topic] * n,
            "source_partition": pa.array([0] * n, pa.int32()),
            "source_offset": pa.array(list(range(n)), pa.int64()),
            "source_timestamp": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
            "key": pa.array([None] * n, pa.binary()),
            "value": pa.array([b"x"] * n, pa.binary()),
            "headers": pa.array([[]] * n, BAD_RECORD_SCHEMA.field("headers").type),
            "stage": stages,
            "error_class": ["E"] * n,
            "error_message": ["bad"] * n,
            "run_id": ["r1"] * n,
            "failed_at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
        },
        schema=BAD_RECORD_SCHEMA,
    )


def test_status_after_apply_shows_lag_commit_run_dlq_and_suspension(
    stack_project, kafka_broker, schema_registry, catalog_server, spark
):
    topic = unique_name("orders")
    idle_topic = unique_name("idle")
    namespace = unique_namespace("status")
    produce_sample("orders", kafka_broker.bootstrap, schema_registry.url, topic, 200, partitions=4)
    produce_sample("orders", kafka_broker.bootstrap, schema_registry.url, idle_topic, 12)
    tables = [{"name": "orders", "topic": topic}]
    root = stack_project(namespace=namespace, tables=tables)
    project = load_project(root)
    plan = PlanTask(project, project.tables).run()
    assert ApplyTask(project, plan, spark=spark).run().status == "success"

    produce_sample(
        "orders", kafka_broker.bootstrap, schema_registry.url, topic, 30, partitions=4, seed=3
    )
    catalog = catalog_server.pyiceberg_catalog()
    iceberg = catalog.load_table((namespace, "orders"))
    with iceberg.transaction() as tx:
        tx.set_properties({"tableflow.suspended": "paused by test"})
    sync_delta_log(catalog.load_table((namespace, "orders")))
    dead = catalog.create_table((namespace, "dead_letters"), BAD_RECORD_SCHEMA)
    dead.append(_bad_rows(topic, ["decode", "decode", "check"]))
    dead.append(_bad_rows("another-topic", ["decode"]))

    # Same project, now declaring a DLQ table and a second, never-applied table.
    stack_project(
        namespace=namespace,
        tables=[
            {
                **tables[0],
                "dlq": {"type": "iceberg", "table": f"{namespace}.dead_letters"},
                "formats": ["iceberg", "delta"],
            },
            {
                "name": "idle",
                "topic": idle_topic,
                "dlq": {"type": "iceberg", "table": f"{namespace}.missing"},
            },
        ],
    )
    outcome = CliRunner().invoke(cli, ["--project-dir", str(root), "status", "--json"])
    assert outcome.exit_code == 0, outcome.output
    data = json.loads(outcome.output)
    assert data["status_version"] == 1 and data["project"] == "shop"
    orders, idle = data["tables"]

    current = catalog.load_table((namespace, "orders")).current_snapshot()
    assert orders["state"] == "suspended" and orders["suspended"] is True
    assert orders["suspended_reason"] == "paused by test"
    assert orders["lag"] == 30
    assert sum(p["high"] - p["committed"] for p in orders["partitions"]) == 30
    assert orders["rows"] == 200 and orders["data_files"] >= 1
    assert orders["snapshot_id"] == current.snapshot_id
    assert 0 <= orders["last_commit_age_s"] < 600
    assert orders["last_run"]["status"] == "success"
    assert orders["last_run"]["records_written"] == 200
    assert orders["dlq"] == {
        "type": "iceberg",
        "target": f"{namespace}.dead_letters",
        "exists": True,
        "records": 3,
        "by_stage": {"decode": 2, "check": 1},
    }
    assert orders["delta"] == {
        "exists": True,
        "mirrored_snapshot_id": current.snapshot_id,
        "in_sync": True,
    }
    assert orders["problems"] == []

    assert idle["state"] == "not_created" and idle["exists"] is False
    assert idle["lag"] == 12 and idle["snapshot_id"] is None and idle["last_run"] is None
    assert idle["dlq"]["exists"] is False and idle["dlq"]["records"] == 0
    assert idle["delta"] is None

    human = CliRunner().invoke(cli, ["--project-dir", str(root), "status"])
    assert human.exit_code == 0, human.output
    assert "suspended: paused by test" in human.output
    assert f"{namespace}.dead_letters: 3 (check 1, decode 2)" in human.output
    assert f"{namespace}.orders" in human.output and "…" not in human.output

    # The docs site, enriched from the same stack: catalog schema and live status.
    docs = CliRunner().invoke(cli, ["--project-dir", str(root), "docs", "generate"])
    assert docs.exit_code == 0, docs.output
    page = (root / "target" / "docs" / "tables" / "orders.html").read_text()
    assert "the catalog (Iceberg schema" in page and ">order_id<" in page
    assert "suspended (paused by test)" in page and f"{namespace}.dead_letters: 3" in page
    idle_page = (root / "target" / "docs" / "tables" / "idle.html").read_text()
    assert "the schema registry (subject" in idle_page and "not created yet" in idle_page
