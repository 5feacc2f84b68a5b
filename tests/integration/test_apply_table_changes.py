"""In-place table changes planned from YAML edits and applied through Spark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tableflow_core.config.loader import load_project
from tableflow_core.dev.processes import free_port
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.catalog import unique_namespace
from tests.plan_project import write_project

pytestmark = pytest.mark.slow


def edit_table(root: Path, **changes: object) -> None:
    path = root / "tables" / "tables.yml"
    data = yaml.safe_load(path.read_text())
    data["tables"][0].update(changes)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_properties_partition_spec_and_sort_order_change_in_place(
    stack_project, sample_orders, catalog_server, spark
) -> None:
    topic = sample_orders.create(50, partitions=2)
    namespace = unique_namespace("ddl")
    root = stack_project(
        namespace=namespace,
        tables=[{"name": "orders", "topic": topic, "properties": {"team": "sales"}}],
    )
    project = load_project(root)
    ApplyTask(project, PlanTask(project, project.tables).run(), spark=spark).run()

    edit_table(
        root,
        properties={"team": "finance", "write.target-file-size-bytes": "67108864"},
        partition_by=["day(created_at)", "bucket(8, customer_id)"],
        sort_by=["created_at desc"],
    )
    project = load_project(root)
    plan = PlanTask(project, project.tables).run()
    kinds = sorted(a.kind for a in plan.actions)
    assert kinds == ["change_partition_spec", "change_sort_order", "update_properties"], kinds
    assert not plan.blockers
    results = ApplyTask(project, plan, spark=spark).run()
    assert results.status == "success", results.errors

    # Read back independently with pyiceberg through the REST catalog.
    table = catalog_server.pyiceberg_catalog().load_table(f"{namespace}.orders")
    assert table.properties["team"] == "finance"
    assert table.properties["write.target-file-size-bytes"] == "67108864"
    schema = table.schema()
    fields = {(schema.find_column_name(f.source_id), str(f.transform)) for f in table.spec().fields}
    assert fields == {("created_at", "day"), ("customer_id", "bucket[8]")}
    (sort_field,) = table.sort_order().fields
    assert schema.find_column_name(sort_field.source_id) == "created_at"
    assert str(sort_field.direction).lower().endswith("desc")
    assert table.scan().to_arrow().num_rows == 50  # the data is untouched

    again = PlanTask(project, project.tables).run()
    assert not again.has_changes, [a.kind for a in again.actions]


def test_plan_with_the_broker_down_names_kafka_and_its_address(tmp_path) -> None:
    port = free_port()  # nothing listens here
    root = write_project(
        tmp_path / "project",
        bootstrap=f"127.0.0.1:{port}",
        registry_url="http://127.0.0.1:9",
        catalog_uri="http://127.0.0.1:9",
        credential="x:y",
        namespace="n",
        tables=[{"name": "events", "topic": "events", "value": {"format": "json"}}],
    )
    # Plain JSON needs no registry; an embedded catalog needs no server: Kafka is the only peer.
    project_file = root / "tableflow_project.yml"
    data = yaml.safe_load(project_file.read_text())
    data["targets"]["test"]["catalog"] = {
        "type": "embedded",
        "warehouse": str(tmp_path / "wh"),
        "port": free_port(),
        "auth": {"mode": "none"},
    }
    del data["targets"]["test"]["schema_registry"]
    project_file.write_text(yaml.safe_dump(data))
    result = subprocess.run(
        [sys.executable, "-m", "tableflow_core", "plan"],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
        timeout=120,
    )
    assert result.returncode == 1
    assert f"kafka at 127.0.0.1:{port}" in result.stderr
    assert "Nothing was changed" in result.stderr
