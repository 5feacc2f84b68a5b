"""The pure builder with publish_to, formats [.., delta] and maintenance (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tableflow_core.config.loader import load_project
from tableflow_core.config.project import Project
from tableflow_core.plan.actions import MaintenanceDue, PublishTable
from tableflow_core.plan.builder import build_plan
from tableflow_core.plan.dag import publish_catalog
from tableflow_core.plan.plan_file import load_plan, save_plan
from tableflow_core.plan.render_human import action_lines
from tableflow_core.plan.render_json import plan_document, shipped_schema
from tableflow_core.plan.render_markdown import render_markdown
from tests.unit.test_plan_builder import observed, world

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
CURRENT = "file:///wh/shop/orders/metadata/00002.metadata.json"
OLD = "file:///wh/shop/orders/metadata/00001.metadata.json"


def project_with(tmp_path: Path, **table: Any) -> Project:
    from tests.plan_project import write_project

    entry = {"name": "orders", "topic": "orders", "partition_by": ["day(ts)"], **table}
    root = write_project(
        tmp_path / "p", bootstrap="127.0.0.1:1", registry_url="http://127.0.0.1:1",
        catalog_uri="http://127.0.0.1:1", credential="a:b", namespace="shop", tables=[entry],
    )  # fmt: skip
    config_file = root / "tableflow_project.yml"
    document = yaml.safe_load(config_file.read_text())
    document["targets"]["test"]["publish_catalogs"] = {
        "lake": {"type": "sql", "uri": "sqlite:////tmp/x.db", "warehouse": "file:///wh"},
        "other": {"type": "rest", "uri": "http://127.0.0.1:1"},
    }
    config_file.write_text(yaml.safe_dump(document, sort_keys=False))
    return load_project(root)


def caught_up(project: Project, **extra: Any) -> Any:
    """The table exists, has read everything, and sits at CURRENT."""
    table = observed(project, metadata_location=CURRENT)
    return world(project, table, watermarks={0: (0, 10), 1: (0, 4)}, **extra)


def test_stale_and_missing_pointers_plan_a_publish_that_apply_runs_alone(tmp_path: Path) -> None:
    project = project_with(tmp_path, publish_to=["lake", "other"])
    state = caught_up(project, published={"orders": {"lake": OLD, "other": None}})
    plan = build_plan(project, project.tables, state, now=NOW)
    assert not plan.blockers, plan.blockers
    (action,) = plan.actions
    assert isinstance(action, PublishTable) and action.catalogs == ("lake", "other")
    assert action.details == (
        f"update shop.orders in catalog lake: points at {OLD}, table is at {CURRENT}",
        "register shop.orders in catalog other (not published yet)",
    )
    assert plan.has_changes
    tasks = plan.dag.tasks
    assert [(t.id, t.kind, t.depends_on) for t in tasks] == [
        ("publish:orders:lake", "publish", ()),
        ("publish:orders:other", "publish", ()),
    ]
    assert [publish_catalog(t) for t in tasks] == ["lake", "other"]
    lines = [line.plain for line in action_lines(action)]
    assert lines[0] == "~ publish shop.orders to lake, other"
    jsonschema.validate(plan_document(plan), shipped_schema())
    save_plan(plan, tmp_path / "plan.json")
    assert load_plan(tmp_path / "plan.json") == plan
    assert "publish_table `shop.orders`" in render_markdown(plan)


def test_current_pointers_plan_nothing(tmp_path: Path) -> None:
    project = project_with(tmp_path, publish_to=["lake"])
    plan = build_plan(
        project, project.tables, caught_up(project, published={"orders": {"lake": CURRENT}})
    )
    assert plan.actions == () and not plan.has_changes and plan.dag.tasks == ()


def test_only_stale_catalogs_are_published(tmp_path: Path) -> None:
    project = project_with(tmp_path, publish_to=["lake", "other"])
    state = caught_up(project, published={"orders": {"lake": CURRENT, "other": OLD}})
    plan = build_plan(project, project.tables, state)
    assert [t.id for t in plan.dag.tasks] == ["publish:orders:other"]


def test_unreadable_pointers_plan_a_publish_of_every_catalog(tmp_path: Path) -> None:
    project = project_with(tmp_path, publish_to=["lake", "other"])
    state = caught_up(project, publish_errors={"orders": "PublishError: connection refused"})
    (action,) = build_plan(project, project.tables, state).actions
    assert isinstance(action, PublishTable) and action.catalogs == ("lake", "other")
    assert "cannot read the pointers: PublishError: connection refused" in action.details[0]


def test_every_commit_is_followed_by_publish_and_delta_tasks(tmp_path: Path) -> None:
    project = project_with(tmp_path, publish_to=["lake"], formats=["iceberg", "delta"])
    # 6 new records in partition 0: an ingest; the pointer is current, yet apply
    # publishes after the ingest's commit (the commit moves it).
    state = world(
        project,
        observed(project, metadata_location=CURRENT),
        watermarks={0: (0, 16), 1: (0, 4)},
        published={"orders": {"lake": CURRENT}},
    )
    plan = build_plan(project, project.tables, state)
    assert not plan.blockers, plan.blockers
    assert [a.kind for a in plan.actions] == ["ingest"]
    assert [(t.id, t.kind, t.depends_on) for t in plan.dag.tasks] == [
        ("ingest:orders", "ingest", ()),
        ("publish:orders:lake", "publish", ("ingest:orders",)),
        ("delta:orders", "sync_delta", ("ingest:orders",)),
    ]


def test_a_new_table_publishes_after_its_ddl(tmp_path: Path) -> None:
    project = project_with(tmp_path, publish_to=["other"])
    plan = build_plan(project, project.tables, world(project, None))
    publish = plan.dag.task("publish:orders:other")
    assert publish.depends_on == ("ingest:orders",)


def test_publish_to_is_no_longer_refused(tmp_path: Path) -> None:
    project = project_with(tmp_path, publish_to=["lake"])
    plan = build_plan(project, project.tables, caught_up(project))
    assert not [b for b in plan.blockers if b.key == "publish_to"]


def test_delta_on_an_upsert_table_is_refused_at_its_formats_line(tmp_path: Path) -> None:
    project = project_with(
        tmp_path, mode="upsert", key_columns=["id"], formats=["iceberg", "delta"]
    )
    plan = build_plan(project, project.tables, world(project, None))
    (blocker,) = [b for b in plan.blockers if b.key == "formats"]
    table = project.table("orders")
    assert blocker.kind == "invalid" and blocker.table == "orders"
    assert blocker.location == f"{table.source.file}:{table.key_lines['formats']}"
    assert "format delta is not available for mode upsert" in blocker.message


def test_delta_on_an_append_table_is_planned(tmp_path: Path) -> None:
    project = project_with(tmp_path, formats=["iceberg", "delta"])
    plan = build_plan(project, project.tables, world(project, None))
    assert not plan.blockers, plan.blockers
    assert plan.dag.task("delta:orders").depends_on == ("ingest:orders",)


def test_due_maintenance_is_shown_and_does_not_make_changes(tmp_path: Path) -> None:
    project = project_with(tmp_path, maintenance={"every": "1h", "compact": {"min_input_files": 2}})
    ran = {"tableflow.maintenance.compact.last-run": "2026-11-22T08:30:00+00:00"}
    for properties, expected in (
        ({}, ("compact on orders (every 1h, 10 commits or 20 small files; never run)",)),
        (
            ran,
            (
                "compact on orders (every 1h, 10 commits or 20 small files; "
                "last run 2026-11-22T08:30:00+00:00, 90m ago)",
            ),
        ),
    ):
        table = observed(project, metadata_location=CURRENT)
        table = type(table)(**{**table.__dict__, "properties": {**table.properties, **properties}})
        plan = build_plan(project, project.tables, world(project, table), now=NOW)
        (action,) = plan.actions
        assert isinstance(action, MaintenanceDue) and action.operations == expected
        assert not plan.has_changes and not plan.blockers and plan.dag.tasks == ()
        assert "maintenance due on shop.orders" in action_lines(action)[0].plain
        jsonschema.validate(plan_document(plan), shipped_schema())
    recent = {"tableflow.maintenance.compact.last-run": "2026-11-22T09:30:00+00:00"}
    table = observed(project, metadata_location=CURRENT)
    table = type(table)(**{**table.__dict__, "properties": {**table.properties, **recent}})
    assert build_plan(project, project.tables, world(project, table), now=NOW).actions == ()
