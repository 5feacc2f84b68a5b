"""plan -> apply -> plan against the real broker, registry, catalog server and Spark."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tableflow_core.cli.main import cli
from tableflow_core.config.loader import load_project
from tableflow_core.plan.actions import CreateTable, Ingest
from tableflow_core.plan.plan_file import StalePlanError, load_plan, save_plan
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.lake import LAKES

pytestmark = pytest.mark.slow


def plan_of(root):
    project = load_project(root)
    return project, PlanTask(project, project.tables).run()


@LAKES
def test_plan_apply_plan_then_lag_then_stale(tmp_path, stack_project, sample_orders, lake, spark):
    topic = sample_orders.create(200, partitions=4)
    namespace = unique_namespace("shop")
    root = stack_project(
        namespace=namespace,
        tables=[
            {
                "name": "orders",
                "topic": topic,
                "partition_by": ["day(created_at)"],
                "metadata_columns": ["partition", "offset"],
                "tags": ["sales"],
            }
        ],
    )

    # 1. Empty catalog: plan lists creates and the whole topic as lag.
    project, plan = plan_of(root)
    kinds = [a.kind for a in plan.actions]
    assert kinds == ["create_namespace", "create_table", "ingest"], kinds
    create = next(a for a in plan.actions if isinstance(a, CreateTable))
    assert {"order_id", "amount", "_kafka_offset"} <= {c.name for c in create.columns}
    ingest = next(a for a in plan.actions if isinstance(a, Ingest))
    assert ingest.records == 200 and sum(p.lag for p in ingest.partitions) == 200
    assert plan.summary_line().startswith(
        "Plan: 1 to create, 0 to update, 0 to replace, 1 table to ingest (200 records)"
    )

    # 2. Apply creates and ingests, on the shared Spark session.
    results = ApplyTask(project, plan, spark=spark).run()
    assert results.status == "success", results
    (table_result,) = results.tables
    assert table_result.records_written == 200
    assert sum(table_result.offsets_after.values()) == 200
    assert (root / "target" / "run_results.json").is_file()
    loaded = lake.pyiceberg_catalog().load_table((namespace, "orders"))
    assert loaded.metadata.location.startswith("s3://" if lake.kind == "s3" else "file:")
    rows = loaded.scan().to_arrow()
    assert rows.num_rows == 200 and len(set(rows["order_id"].to_pylist())) == 200

    # 3. Plan again: no changes, exit code 0 with --detailed-exitcode.
    outcome = CliRunner().invoke(cli, ["--project-dir", str(root), "plan", "--detailed-exitcode"])
    assert outcome.exit_code == 0, outcome.output
    assert "No changes" in outcome.output

    # 4. More records: plan shows exactly that lag (exit code 2).
    more = sample_orders.produce(topic, 30, partitions=4, seed=7)
    project, plan = plan_of(root)
    (ingest,) = [a for a in plan.actions if isinstance(a, Ingest)]
    assert [a.kind for a in plan.actions] == ["ingest"]
    assert ingest.records == 30
    assert {p.partition: p.lag for p in ingest.partitions} == {
        p: more.per_partition.get(p, 0) for p in range(4)
    }
    outcome = CliRunner().invoke(cli, ["--project-dir", str(root), "plan", "--detailed-exitcode"])
    assert outcome.exit_code == 2, outcome.output

    # 5. A saved plan is refused once someone else changed the table.
    saved = tmp_path / "plan.json"
    save_plan(plan, saved)
    ApplyTask(project, PlanTask(project, project.tables).run(), spark=spark).run()
    with pytest.raises(StalePlanError) as refused:
        ApplyTask(project, load_plan(saved), spark=spark).run()
    message = str(refused.value)
    assert "current snapshot id" in message and "committed offsets" in message
    outcome = CliRunner().invoke(cli, ["--project-dir", str(root), "apply", str(saved)])
    assert outcome.exit_code == 1
    assert "stale" in outcome.output
