"""Plan-time checks: partition, sort and key columns against the resolved schema, with
file:line, and schema problems pointing at the table's `value:` key (pure, no I/O)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from tableflow_core.config.loader import load_project
from tableflow_core.plan.builder import build_plan
from tableflow_core.plan.world_state import TopicState, WorldState
from tableflow_core.schemas.resolve import ResolvedSchema, schema_fingerprint
from tests.plan_project import write_project
from tests.unit.test_plan_builder import observed

SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("customer", pa.struct([("region", pa.string()), ("tags", pa.list_(pa.string()))])),
    ]
)


def project_with(tmp_path: Path, **table: object):
    root = write_project(
        tmp_path / "p", bootstrap="127.0.0.1:1", registry_url="http://127.0.0.1:1",
        catalog_uri="http://127.0.0.1:1", credential="a:b", namespace="shop",
        tables=[{"name": "orders", "topic": "orders", **table}],
    )  # fmt: skip
    return load_project(root)


def plan_for(project, schema: pa.Schema = SCHEMA, **world: object):
    state = WorldState(
        schemas={
            "orders": ResolvedSchema(schema, 1, 1, "orders-value", schema_fingerprint(schema))
        },
        topics={"orders": TopicState("orders", {0: (0, 0)})},
        **world,  # type: ignore[arg-type]
    )
    return build_plan(project, project.tables, state)


def line_of(project, key: str) -> str:
    table = project.tables[0]
    return f"{table.source.file}:{table.key_lines[key]}"


def test_valid_columns_pass(tmp_path: Path) -> None:
    project = project_with(
        tmp_path,
        partition_by=["day(ts)", "bucket(4, id)", "customer.region", "truncate(2, id)"],
        sort_by=["amount desc", "customer.region"],
    )
    assert plan_for(project).blockers == ()


def test_misspelled_and_unusable_columns_are_blocked_with_file_and_line(tmp_path: Path) -> None:
    project = project_with(
        tmp_path,
        partition_by=["day(created_at)", "hour(id)", "bucket(4, amount)", "customer.tags"],
        sort_by=["amout", "customer"],
    )
    plan = plan_for(project)
    got = [(b.kind, b.key, b.location, b.message) for b in plan.blockers]
    partition, sort = line_of(project, "partition_by"), line_of(project, "sort_by")
    assert got == [
        (
            "invalid",
            "partition_by",
            partition,
            "partition column 'created_at': the table has no column 'created_at' "
            "(it has id, amount, ts, customer)",
        ),
        (
            "invalid",
            "partition_by",
            partition,
            "partition transform hour cannot apply to column 'id' of type string: "
            "it needs a timestamp",
        ),
        (
            "invalid",
            "partition_by",
            partition,
            "partition transform bucket cannot apply to column 'amount' of type double: "
            "it needs int, long, decimal, date, time, timestamp, string or binary",
        ),
        (
            "invalid",
            "partition_by",
            partition,
            "partition transform identity cannot apply to column 'customer.tags' of type "
            "list<item: string>: it needs a primitive column (not a struct, list or map)",
        ),
        (
            "invalid",
            "sort_by",
            sort,
            "sort column 'amout': the table has no column 'amout' (it has id, amount, ts, "
            "customer); did you mean 'amount'?",
        ),
        (
            "invalid",
            "sort_by",
            sort,
            "sort column 'customer' is a struct<region: string, tags: list<item: string>>, "
            "not a primitive",
        ),
    ]


def test_nested_paths_and_key_columns(tmp_path: Path) -> None:
    project = project_with(
        tmp_path, mode="upsert", key_columns=["id", "customer.zone"], partition_by=["id.x"]
    )
    messages = [b.message for b in plan_for(project).blockers if b.kind == "invalid"]
    assert messages == [
        "partition column 'id.x': 'id' is a string, not a struct",
        "key column 'customer.zone': customer has no column 'zone' (it has region, tags)",
    ]


def test_a_column_the_table_keeps_can_still_partition(tmp_path: Path) -> None:
    """A column the writer dropped stays in the table: partitioning by it stays valid."""
    project = project_with(tmp_path, partition_by=["day(ts)"])
    without_ts = pa.schema([f for f in SCHEMA if f.name != "ts"])
    table = observed(project, schema=SCHEMA, partition_by=())
    plan = plan_for(project, without_ts, tables={"shop.orders": table})
    assert [b for b in plan.blockers if b.key == "partition_by"] == []
    (evolve,) = [a for a in plan.actions if a.kind == "evolve_schema"]
    assert [(c.kind, c.path) for c in evolve.changes] == [("keep_column", "ts")]


def test_schema_problems_point_at_the_value_key(tmp_path: Path) -> None:
    project = project_with(tmp_path, value={"format": "protobuf"})
    problem = (
        "schema: topic 'orders': value schema (subject 'orders-value' version 1): set `message:`"
    )
    [blocker] = build_plan(
        project, project.tables, WorldState(problems={"orders": (problem,)})
    ).blockers
    assert blocker.key == "value" and blocker.location == line_of(project, "value")
    assert blocker.message == problem
