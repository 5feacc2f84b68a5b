"""A table whose topic the broker does not have (issue 32): one blocker at the table's
`topic:` line with a hint, not a raw client error at the table's first line."""

from __future__ import annotations

from pathlib import Path

from tableflow_core.plan.builder import build_plan
from tableflow_core.plan.world_state import WorldState
from tests.unit.test_plan_builder import V1, make_project, resolved


def plan_missing(tmp_path: Path, topic: str, broker_topics: set[str]):  # type: ignore[no-untyped-def]
    project = make_project(tmp_path, topic=topic)
    world = WorldState(
        schemas={"orders": resolved(V1)},
        missing_topics=frozenset({topic}),
        broker_topics=frozenset(broker_topics),
    )
    return project, build_plan(project, project.tables, world)


def test_a_close_name_is_suggested_at_the_topic_line(tmp_path: Path) -> None:
    project, plan = plan_missing(tmp_path, "ordres", {"orders", "payments"})
    (blocker,) = plan.blockers
    table = project.tables[0]
    assert blocker.key == "topic" and blocker.table == "orders"
    assert blocker.location == str(table.location_of("topic"))
    assert blocker.location != str(table.source)
    assert blocker.message == (
        "topic 'ordres' does not exist on kafka at 127.0.0.1:1; did you mean 'orders'?"
    )
    assert not [a for a in plan.actions if a.kind == "ingest"]


def test_without_a_close_name_it_says_to_produce_or_create_it(tmp_path: Path) -> None:
    _, plan = plan_missing(tmp_path, "clickstream", {"orders", "payments"})
    (blocker,) = plan.blockers
    assert "does not exist on kafka at 127.0.0.1:1; produce to it first, or create it" in (
        blocker.message
    )
    assert blocker.message.endswith("Topics on the broker: orders, payments")
    assert "did you mean" not in blocker.message


def test_the_local_stack_hint_names_dev_produce(tmp_path: Path) -> None:
    project, _ = plan_missing(tmp_path, "clickstream", set())
    config = project.config_file
    config.write_text(
        config.read_text().replace("  test:\n", "  test:\n    dev_stack: {kafka_port: 19092}\n", 1)
    )
    from tableflow_core.config.loader import load_project

    project = load_project(project.root)
    world = WorldState(schemas={"orders": resolved(V1)}, missing_topics=frozenset({"clickstream"}))
    (blocker,) = build_plan(project, project.tables, world).blockers
    assert "`tableflow dev produce orders --topic clickstream`" in blocker.message
    assert "Topics on the broker" not in blocker.message  # it has none


def test_the_subject_named_after_a_missing_topic_is_not_a_second_blocker(tmp_path: Path) -> None:
    problem = "schema: subject 'ordres-value' not found"
    project = make_project(tmp_path, topic="ordres")
    world = WorldState(problems={"orders": (problem,)}, missing_topics=frozenset({"ordres"}))
    (blocker,) = build_plan(project, project.tables, world).blockers
    assert blocker.key == "topic"
    # A subject the table names itself is its own problem.
    named = make_project(
        tmp_path / "named", topic="ordres", value={"format": "avro", "subject": "shared-value"}
    )
    blockers = build_plan(named, named.tables, world).blockers
    assert [b.key for b in blockers] == ["topic", "value"]
