"""The pure builder with hand-made world states: no I/O, one test per action kind."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pyarrow as pa
import pytest
from rich.console import Console

from tableflow_core.config.loader import load_project
from tableflow_core.errors import BindError
from tableflow_core.ingest.bad_records import BAD_RECORD_SCHEMA
from tableflow_core.plan.actions import PartitionTerm
from tableflow_core.plan.builder import build_plan
from tableflow_core.plan.plan import PlanOptions
from tableflow_core.plan.plan_file import load_plan, save_plan, stale_reasons
from tableflow_core.plan.render_human import render_human
from tableflow_core.plan.render_json import generate_schema, plan_document, shipped_schema
from tableflow_core.plan.render_markdown import render_markdown
from tableflow_core.plan.shape import managed_properties
from tableflow_core.plan.world_state import ObservedTable, TopicState, WorldState
from tableflow_core.runner.binding import bind_spec
from tableflow_core.schemas.evolution import iceberg_schema_for
from tableflow_core.schemas.resolve import ResolvedSchema, schema_fingerprint
from tests.plan_project import write_project

V1 = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("amount", pa.int32()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
    ]
)
V2 = pa.schema([*V1, pa.field("channel", pa.string())])


def resolved(schema: pa.Schema, version: int = 1) -> ResolvedSchema:
    return ResolvedSchema(schema, 10 + version, version, "orders-value", schema_fingerprint(schema))


def make_project(tmp_path: Path, **table_overrides):
    table = {"name": "orders", "topic": "orders", "partition_by": ["day(ts)"], **table_overrides}
    root = write_project(
        tmp_path / "p", bootstrap="127.0.0.1:1", registry_url="http://127.0.0.1:1",
        catalog_uri="http://127.0.0.1:1", credential="a:b", namespace="shop", tables=[table],
    )  # fmt: skip
    return load_project(root)


def observed(project, schema=V1, **overrides) -> ObservedTable:
    table = project.tables[0]
    values = {
        "identifier": "shop.orders",
        "schema": iceberg_schema_for(schema),
        "schema_id": 0,
        "partition_by": (PartitionTerm(column="ts", transform="day"),),
        "properties": {**managed_properties(table), "tableflow.mode": "append"},
        "snapshot_id": 5,
        "committed": {0: 10, 1: 4},
        **overrides,
    }
    return ObservedTable(**values)


def world(project, table=None, schema=V1, watermarks=None, **extra) -> WorldState:
    tables = {"shop.orders": table} if table is not None else {}
    return WorldState(
        namespaces=frozenset({("shop",)}) if table is not None else frozenset(),
        tables=tables,
        listed_tables=frozenset(tables),
        schemas={"orders": resolved(schema)},
        topics={"orders": TopicState("orders", watermarks or {0: (0, 10), 1: (0, 4)})},
        **extra,
    )


def kinds(plan):
    return [a.kind for a in plan.actions]


def test_empty_catalog_creates_namespace_table_and_ingests(tmp_path):
    project = make_project(tmp_path)
    plan = build_plan(project, project.tables, world(project))
    assert kinds(plan) == ["create_namespace", "create_table", "ingest"]
    assert plan.actions[2].records == 14
    assert plan.summary.to_create == 1 and plan.has_changes
    assert [t.id for t in plan.dag.tasks] == ["namespace:shop", "ddl:orders", "ingest:orders"]
    assert plan.dag.task("ingest:orders").depends_on == ("ddl:orders",)


def test_up_to_date_table_has_no_changes(tmp_path):
    project = make_project(tmp_path)
    plan = build_plan(project, project.tables, world(project, observed(project)))
    assert plan.actions == () and not plan.has_changes and not plan.blockers
    assert (
        plan.summary_line()
        == "Plan: 0 to create, 0 to update, 0 to replace, 0 tables to ingest (0 records)"
    )


def test_lag_per_partition_and_cap(tmp_path):
    project = make_project(tmp_path, max_records_per_run=6)
    plan = build_plan(
        project,
        project.tables,
        world(project, observed(project), watermarks={0: (0, 15), 1: (0, 10)}),
    )
    (ingest,) = plan.actions
    assert ingest.kind == "ingest" and ingest.pending == 11 and ingest.records == 6
    assert {p.partition: (p.committed, p.lag, p.start, p.read_to) for p in ingest.partitions} == {
        0: (10, 5, 10, 13),
        1: (4, 6, 4, 7),
    }
    assert sum(r.size for r in ingest.ranges) == 6


def test_added_registry_field_is_in_place_evolution(tmp_path):
    project = make_project(tmp_path)
    plan = build_plan(project, project.tables, world(project, observed(project), schema=V2))
    (evolve,) = plan.actions
    assert evolve.kind == "evolve_schema"
    assert [(c.kind, c.path) for c in evolve.changes] == [("add_column", "channel")]
    assert plan.summary.to_update == 1 and not plan.blockers


def test_properties_partition_and_sort_changes(tmp_path):
    project = make_project(
        tmp_path, properties={"write.target-file-size-bytes": "1000"}, sort_by=["id desc"]
    )
    old_props = {
        k: v
        for k, v in managed_properties(project.tables[0]).items()
        if k != "write.target-file-size-bytes"
    }
    plan = build_plan(
        project,
        project.tables,
        world(project, observed(project, partition_by=(), properties=old_props)),
    )
    assert kinds(plan) == ["change_partition_spec", "change_sort_order", "update_properties"]
    props = plan.actions[2]
    assert props.set == {"write.target-file-size-bytes": "1000"} and props.previous == {
        "write.target-file-size-bytes": None
    }
    assert plan.summary.to_update == 1


def test_incompatible_schema_is_a_blocked_replace(tmp_path):
    project = make_project(tmp_path)
    narrowed = pa.schema(
        [
            pa.field("id", pa.string()),
            pa.field("amount", pa.string()),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
        ]
    )
    plan = build_plan(project, project.tables, world(project, observed(project), schema=narrowed))
    assert kinds(plan)[0] == "replace_table"
    assert [b.kind for b in plan.blockers] == ["destructive"]
    # A replaced table starts over: the ingest reads from the beginning.
    assert plan.actions[1].records == 14
    allowed = build_plan(
        project,
        project.tables,
        world(project, observed(project), schema=narrowed),
        options=PlanOptions(allow_destructive=True),
    )
    assert not allowed.blockers and allowed.summary.to_replace == 1


def test_switch_to_upsert_is_a_replace(tmp_path):
    project = make_project(tmp_path, mode="upsert", key_columns=["id"])
    for allow in (False, True):
        plan = build_plan(
            project,
            project.tables,
            world(project, observed(project)),
            options=PlanOptions(allow_destructive=allow),
        )
        assert kinds(plan)[0] == "replace_table"
        assert "mode append -> upsert" in plan.actions[0].reasons
        assert [b.kind for b in plan.blockers] == ([] if allow else ["destructive"])


def test_changing_key_columns_is_a_replace_and_plan_shows_mode_key_and_stages(tmp_path):
    project = make_project(tmp_path, mode="upsert", key_columns=["id", "ts"])
    table = project.tables[0]
    props = {**managed_properties(table), "tableflow.key-columns": "id"}
    plan = build_plan(project, project.tables, world(project, observed(project, properties=props)))
    assert kinds(plan)[0] == "replace_table"
    assert plan.actions[0].reasons == ("key columns (id) -> (id, ts)",)
    assert plan.blockers[0].kind == "destructive"
    ingest = next(a for a in plan.actions if a.kind == "ingest")
    assert ingest.mode == "upsert" and ingest.key_columns == ("id", "ts")
    assert [s.kind for s in ingest.stages] == [
        "read_ranges", "decode", "route_bad_records", "write", "publish",
    ]  # fmt: skip
    assert ingest.stages[3].label() == "write(upsert, key id, ts)"
    # the upsert properties: merge-on-read, and the key remembered on the table
    create = build_plan(project, project.tables, world(project)).actions[1]
    assert create.properties["write.merge.mode"] == "merge-on-read"
    assert create.properties["tableflow.key-columns"] == "id,ts"
    console = Console(record=True, width=200)
    render_human(plan, console, show_dag=True)
    text = console.export_text()
    assert "mode upsert by key (id, ts)" in text
    assert "pipeline: read_ranges -> decode(avro, key string) -> " in text
    assert "ingest:orders: read_ranges -> decode(avro, key string)" in text


def test_a_string_key_absent_from_the_value_becomes_a_column(tmp_path):
    project = make_project(tmp_path, mode="upsert", key_columns=["order_key"])
    plan = build_plan(project, project.tables, world(project))
    create = next(a for a in plan.actions if a.kind == "create_table")
    # the key column after the value's; then the Kafka position every upsert row keeps
    assert [c.name for c in create.columns][-4:] == [
        "order_key",
        "_kafka_timestamp",
        "_kafka_partition",
        "_kafka_offset",
    ]
    bad = make_project(tmp_path, mode="upsert", key_columns=["a", "b"])
    blocked = build_plan(bad, bad.tables, world(bad))
    assert blocked.blockers[0].key == "key_columns" and "neither fields of the value" in (
        blocked.blockers[0].message
    )


def test_registry_key_fields_absent_from_the_value_become_columns(tmp_path):
    project = make_project(
        tmp_path, mode="upsert", key_columns=["region", "id"], key={"format": "avro"}
    )
    key_schema = pa.schema([pa.field("region", pa.string()), pa.field("id", pa.int64())])
    resolved_key = ResolvedSchema(key_schema, 7, 1, "orders-key", schema_fingerprint(key_schema))
    state = WorldState(**{**world(project).__dict__, "key_schemas": {"orders": resolved_key}})
    create = next(
        a for a in build_plan(project, project.tables, state).actions if a.kind == "create_table"
    )
    # `id` is a value field (it must equal the key's), `region` comes from the key; then
    # the Kafka position every upsert row keeps
    assert [(c.name, c.type) for c in create.columns][-5:] == [
        ("ts", "timestamptz"),
        ("region", "string"),
        ("_kafka_timestamp", "timestamptz"),
        ("_kafka_partition", "int"),
        ("_kafka_offset", "long"),
    ]


def test_transforms_and_checks_plan_the_output_schema_and_one_line_each(tmp_path):
    project = make_project(
        tmp_path,
        transforms=[
            {"type": "filter", "where": "amount > 0"},
            {"type": "derive", "column": "cents", "expression": "CAST(amount * 100 AS BIGINT)"},
            {"type": "rename", "columns": {"id": "order_id"}},
            {"type": "drop", "columns": ["amount"]},
        ],
        checks=[{"type": "not_null", "columns": ["order_id"], "severity": "warn"}],
    )
    plan = build_plan(project, project.tables, world(project))
    assert not plan.blockers
    create = next(a for a in plan.actions if a.kind == "create_table")
    assert [(c.name, c.type) for c in create.columns] == [
        ("order_id", "string"),
        ("ts", "timestamptz"),
        ("cents", "long"),
    ]
    ingest = next(a for a in plan.actions if a.kind == "ingest")
    described = [line for s in ingest.stages for line in s.details()]
    assert described == [
        "transform: filter where amount > 0",
        "transform: derive cents BIGINT = CAST(amount * 100 AS BIGINT)",
        "transform: rename id -> order_id",
        "transform: drop amount",
        "check not_null(order_id) (warn: warn)",
    ]
    labels = [s.label() for s in ingest.stages]
    assert labels[2:4] == ["transform(filter, derive, rename, drop)", "check(not_null)"]
    console = Console(record=True, width=200)
    render_human(plan, console)
    text = console.export_text()
    assert "derive cents BIGINT = CAST(amount * 100 AS BIGINT)" in text
    assert "check not_null(order_id) (warn: warn)" in text
    assert "drop amount" in render_markdown(plan)
    document = plan_document(plan)
    jsonschema.validate(document, shipped_schema())
    (ingest_json,) = [a for a in document["actions"] if a["kind"] == "ingest"]
    transform = ingest_json["spec"]["stages"][2]
    assert transform["steps"][0] == {"kind": "filter", "text": "filter where amount > 0"}


def test_a_transform_or_check_that_cannot_run_is_a_blocker_at_its_line(tmp_path):
    project = make_project(
        tmp_path,
        transforms=[{"type": "filter", "where": "amout > 0"}],
        checks=[{"type": "not_null", "columns": ["nope"]}],
    )
    plan = build_plan(project, project.tables, world(project))
    (blocker,) = plan.blockers  # the checks are compiled only over a valid output schema
    assert blocker.kind == "invalid" and blocker.table == "orders"
    assert blocker.key == "transforms[0].where"
    assert (
        "unknown column 'amout'" in blocker.message and "did you mean 'amount'" in blocker.message
    )
    file, line = blocker.location.rsplit(":", 1)
    assert file.endswith(".yml") and int(line) > 1
    written = Path(file).read_text().splitlines()[int(line) - 1]
    assert "amout" in written
    assert not any(a.kind in ("create_table", "ingest") for a in plan.actions)

    project = make_project(tmp_path / "checks", checks=[{"type": "not_null", "columns": ["nope"]}])
    (blocker,) = build_plan(project, project.tables, world(project)).blockers
    assert blocker.key.startswith("checks[0]") and "nope" in blocker.message
    assert Path(blocker.location.rsplit(":", 1)[0]).exists()


def test_undeclared_tables_reported_or_pruned(tmp_path):
    project = make_project(tmp_path)
    state = world(project, observed(project))
    state = WorldState(
        **{**state.__dict__, "listed_tables": frozenset({"shop.orders", "shop.legacy"})}
    )
    plan = build_plan(project, project.tables, state)
    assert kinds(plan) == ["undeclared_table"] and not plan.has_changes
    pruned = build_plan(project, project.tables, state, options=PlanOptions(prune=True))
    assert kinds(pruned) == ["drop_table"] and pruned.summary.to_drop == 1
    assert [t.id for t in pruned.dag.tasks] == ["drop:shop.legacy"]


def test_world_problems_become_blockers(tmp_path):
    project = make_project(tmp_path)
    state = WorldState(problems={"orders": ("schema: subject 'orders-value' not found",)})
    plan = build_plan(project, project.tables, state)
    assert [b.kind for b in plan.blockers] == ["invalid"] and "not found" in plan.blockers[
        0
    ].message


def test_json_output_validates_against_the_shipped_schema(tmp_path):
    assert shipped_schema() == generate_schema(), (
        "regenerate tableflow_core/plan/schema/plan.schema.json"
    )
    project = make_project(tmp_path, mode="upsert", key_columns=["id"])
    for state in (
        world(project),
        world(project, observed(project)),
        world(project, observed(project), schema=V2),
    ):
        document = plan_document(build_plan(project, project.tables, state))
        jsonschema.validate(document, shipped_schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**document, "actions": [{"kind": "explode"}]}, shipped_schema())


def test_plan_file_round_trip_and_staleness(tmp_path):
    project = make_project(tmp_path)
    plan = build_plan(project, project.tables, world(project, observed(project)))
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    loaded = load_plan(path)
    assert loaded == plan
    same = build_plan(project, project.tables, world(project, observed(project)))
    from tableflow_core.plan.desired import config_hash

    assert stale_reasons(loaded, same.fingerprints, config_hash(project, project.tables)) == []
    moved = build_plan(
        project,
        project.tables,
        world(project, observed(project, snapshot_id=6, committed={0: 12, 1: 4})),
    )
    reasons = stale_reasons(loaded, moved.fingerprints, "other")
    assert any("configuration" in r for r in reasons)
    assert any("current snapshot id was 5, now 6" in r for r in reasons)
    assert any("committed offsets was {0: 10, 1: 4}, now {0: 12, 1: 4}" in r for r in reasons)


def test_renderers(tmp_path):
    project = make_project(tmp_path, mode="upsert", key_columns=["id"])
    plan = build_plan(project, project.tables, world(project, observed(project), schema=V2))
    console = Console(record=True, width=200)
    render_human(plan, console, show_dag=True)
    text = console.export_text()
    assert "-/+ table (replace: drops data) shop.orders" in text
    assert "! " in text and "--allow-destructive" in text
    assert "ddl:orders: replace_table" in text
    markdown = render_markdown(plan)
    assert markdown.startswith("### tableflow plan") and "| `-/+` | orders |" in markdown
    assert json.loads(json.dumps(plan_document(plan)))["summary"]["blocked"] == 1


def test_iceberg_dead_letter_table_is_created_before_the_ingest_that_uses_it(tmp_path):
    project = make_project(
        tmp_path, on_error="dlq", dlq={"type": "iceberg", "table": "ops.bad_records"}
    )
    state = world(project, observed(project), watermarks={0: (0, 20), 1: (0, 4)})
    plan = build_plan(project, project.tables, state)
    assert not plan.blockers
    assert "create_dlq_table:ops.bad_records" in [a.id for a in plan.actions]
    assert "create_namespace:ops" in [a.id for a in plan.actions]
    ingest = plan.dag.task("ingest:orders")
    assert "dlq:ops.bad_records" in ingest.depends_on
    assert plan.dag.task("dlq:ops.bad_records").depends_on == ("namespace:ops",)
    assert "route_bad_records(dlq)" in ingest.stages

    # Existing with the dead-letter columns: nothing to do, and not reported as undeclared.
    columns = tuple(f.name for f in BAD_RECORD_SCHEMA)
    state = world(project, observed(project), dlq_tables={"ops.bad_records": columns})
    state = WorldState(
        **{
            **state.__dict__,
            "namespaces": frozenset({("shop",), ("ops",)}),
            "listed_tables": frozenset({"shop.orders", "shop.bad"}),
        }
    )
    plan = build_plan(project, project.tables, state)
    assert not [a for a in plan.actions if "ops" in a.id]
    assert not plan.blockers

    # Existing with other columns: refused, not altered.
    state = world(project, observed(project), dlq_tables={"ops.bad_records": ("a", "b")})
    plan = build_plan(project, project.tables, state)
    (blocker,) = plan.blockers
    assert blocker.key == "dlq" and "exists with columns ['a', 'b']" in blocker.message


def test_dead_letter_table_in_a_project_namespace_is_not_undeclared(tmp_path):
    project = make_project(tmp_path, on_error="dlq", dlq={"type": "iceberg", "table": "shop.bad"})
    columns = tuple(f.name for f in BAD_RECORD_SCHEMA)
    state = world(project, observed(project), dlq_tables={"shop.bad": columns})
    state = WorldState(
        **{**state.__dict__, "listed_tables": frozenset({"shop.orders", "shop.bad"})}
    )
    plan = build_plan(project, project.tables, state, options=PlanOptions(prune=True))
    assert [a.kind for a in plan.actions if "shop.bad" in a.id] == []


def test_missing_kafka_dead_letter_topic_is_created_like_the_source_topic(tmp_path):
    project = make_project(tmp_path, on_error="dlq", dlq={"type": "kafka", "topic": "orders-dlq"})
    state = world(
        project,
        observed(project),
        watermarks={0: (0, 20), 1: (0, 4)},
        dlq_topics={"orders-dlq": None},
    )
    plan = build_plan(project, project.tables, state)
    assert not plan.blockers
    (create,) = [a for a in plan.actions if a.kind == "create_topic"]
    assert (create.id, create.identifier) == ("create_dlq_topic:orders-dlq", "orders-dlq")
    assert (create.partitions, create.like_topic, create.used_by) == (2, "orders", ("orders",))
    assert "dlq_topic:orders-dlq" in plan.dag.task("ingest:orders").depends_on
    assert plan.dag.task("dlq_topic:orders-dlq").kind == "create_dlq_topic"
    console = Console(record=True, width=200)
    render_human(plan, console)
    text = console.export_text()
    assert "+ dead-letter topic orders-dlq" in text
    assert "2 partitions (like topic orders)" in text
    jsonschema.validate(plan_document(plan), shipped_schema())
    save_plan(plan, tmp_path / "plan.json")
    assert load_plan(tmp_path / "plan.json").actions == plan.actions
    assert plan.summary.to_create == 1

    # Existing (any partition count), or not looked at: nothing to do.
    for topics in ({"orders-dlq": 1}, {}):
        plan = build_plan(
            project, project.tables, world(project, observed(project), dlq_topics=topics)
        )
        assert "create_topic" not in kinds(plan) and not plan.blockers


def test_kafka_dead_letter_topic_rules(tmp_path):
    # A table that never dead-letters (skip, no dlq check) does not need its topic.
    project = make_project(tmp_path, on_error="skip", dlq={"type": "kafka", "topic": "orders-dlq"})
    plan = build_plan(project, project.tables, world(project, dlq_topics={"orders-dlq": None}))
    assert "create_topic" not in kinds(plan)

    # A check with on_failure dlq does.
    project = make_project(
        tmp_path,
        dlq={"type": "kafka", "topic": "orders-dlq"},
        checks=[{"type": "not_null", "columns": ["id"], "on_failure": "dlq"}],
    )
    plan = build_plan(project, project.tables, world(project, dlq_topics={"orders-dlq": None}))
    assert "create_topic" in kinds(plan)

    # The dead-letter topic cannot be the source topic: refused at the dlq key's line.
    project = make_project(tmp_path, on_error="dlq", dlq={"type": "kafka", "topic": "orders"})
    plan = build_plan(project, project.tables, world(project, dlq_topics={"orders": 2}))
    (blocker,) = plan.blockers
    assert blocker.key == "dlq" and "also the source topic of table 'orders'" in blocker.message
    assert blocker.location is not None and blocker.location.endswith(
        f":{project.tables[0].location_of('dlq').line}"
    )


def test_the_ingest_action_carries_what_apply_runs_and_no_secret(tmp_path, monkeypatch):
    """The spec in the plan (file) is the spec apply runs: bound to the target and the
    salt, it equals the plan's own, and the salt is never in the plan's JSON."""
    monkeypatch.setenv("MASK_SALT", "pepper-1234")
    project = make_project(
        tmp_path,
        transforms=[
            {"type": "mask", "columns": ["id"], "salt": "{{ env_var('MASK_SALT') }}"},
            {"type": "filter", "where": "amount > 0"},
        ],
        checks=[{"type": "not_null", "columns": ["id"]}],
    )
    plan = build_plan(project, project.tables, world(project))
    ingest = next(a for a in plan.actions if a.kind == "ingest")
    spec = ingest.spec
    assert spec.mode == "append" and ingest.on_error == "fail"
    assert spec.decoded_schema == V1 and spec.table_schema().names == ["id", "amount", "ts"]
    assert spec.partition_by == (PartitionTerm(column="ts", transform="day"),)
    mask = spec.compiled.transforms.steps[0]
    assert mask.salted and mask.salt is not None  # in memory, as compiled
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    assert "pepper-1234" not in path.read_text()
    loaded = next(a for a in load_plan(path).actions if a.kind == "ingest").spec
    assert loaded.compiled.transforms.steps[0].salt is None  # not in the file
    bound = bind_spec(loaded, project, "tf_test")
    assert bound.compiled.transforms.steps[0].salt.get_secret_value() == "pepper-1234"
    assert bound.identifier == "`tf_test`.`shop`.`orders`"
    assert bound.model_dump(mode="json") == spec.model_dump(mode="json")
    assert bound.compiled.transforms.output_schema == spec.compiled.transforms.output_schema
    create = next(a for a in load_plan(path).actions if a.kind == "create_table")
    assert create.table_schema == spec.table_schema()


def test_a_salted_mask_without_its_salt_is_refused_at_apply(tmp_path, monkeypatch):
    monkeypatch.setenv("MASK_SALT", "pepper-1234")
    salted = {"type": "mask", "columns": ["id"], "salt": "{{ env_var('MASK_SALT') }}"}
    project = make_project(tmp_path, transforms=[salted])
    plan = build_plan(project, project.tables, world(project))
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    spec = next(a for a in load_plan(path).actions if a.kind == "ingest").spec
    redacted = make_project(
        tmp_path / "other", transforms=[{**salted, "method": "redact", "salt": None}]
    )
    with pytest.raises(BindError, match=r"transforms\[0\] is a salted mask"):
        bind_spec(spec, redacted, "tf_test")


def test_the_plan_shows_the_steps_fused_into_decode(tmp_path):
    """Masks of text columns run while decoding, an append table's leading dedup in the
    read tasks, and `unique` checks on untouched columns are proved by the read tasks'
    key reports: the decode stage shows them, the transform stage the rest, in order."""
    project = make_project(
        tmp_path,
        transforms=[
            {"type": "mask", "columns": ["ts"], "method": "redact"},  # not text: in Spark
            {"type": "mask", "columns": ["id"], "method": "redact"},
            {"type": "dedup", "keys": ["amount"]},
            {"type": "filter", "where": "amount > 0"},
        ],
        checks=[{"type": "unique", "columns": ["amount"]}],
    )
    plan = build_plan(project, project.tables, world(project))
    ingest = next(a for a in plan.actions if a.kind == "ingest")
    labels = [s.label() for s in ingest.stages]
    assert labels[1:4] == [
        "decode(avro + mask, dedup, unique)",
        "transform(mask, filter)",
        "check(unique)",
    ]
    decode, transform = ingest.stages[1], ingest.stages[2]
    assert [line.kind for line in decode.fused] == ["mask", "dedup", "unique"]
    assert decode.fused[0].text.startswith("mask id: redact with '****' (while decoding")
    assert "in the read tasks" in decode.fused[1].text
    assert [line.text for line in transform.steps] == [
        "mask ts: redact with '****'",
        "filter where amount > 0",
    ]
    console = Console(record=True, width=300)
    render_human(plan, console)
    text = console.export_text()
    assert "decode(avro + mask, dedup, unique) -> transform(mask, filter)" in text
    assert "decode: unique(amount): keys reported by the read tasks" in text


def test_plan_shows_an_upsert_table_s_deletes_rule_with_its_budget(tmp_path):
    """The rule on an upsert table's deletes in plan follows its `maintenance:` block's
    `deletes_rewrite_budget`; an append table has none."""
    for maintenance, said in (
        (None, "(at most 37 rows rewritten per row deleted)"),
        ({"deletes_rewrite_budget": 30}, "(at most 1128 rows rewritten per row deleted)"),
        ({"deletes_rewrite_budget": "unbounded"}, "(whatever that rewrites)"),
    ):
        extra = {"maintenance": maintenance} if maintenance else {}
        project = make_project(tmp_path / str(said), mode="upsert", key_columns=["id"], **extra)
        plan = build_plan(project, project.tables, world(project))
        create = next(a for a in plan.actions if a.kind == "create_table")
        assert create.deletes_rewrite_budget == (maintenance or {}).get(
            "deletes_rewrite_budget", 1.0
        )
        console = Console(record=True, width=400)
        render_human(plan, console)
        assert f"above 25% of rows {said}" in console.export_text()
    append = make_project(tmp_path / "append")
    create = next(
        a for a in build_plan(append, append.tables, world(append)).actions
        if a.kind == "create_table"
    )  # fmt: skip
    assert create.deletes_rewrite_budget is None
