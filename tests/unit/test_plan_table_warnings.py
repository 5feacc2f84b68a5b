"""What plan warns about and refuses so that no clear value of a masked column lands
where a mask promises none, and what it says about keys (issue #27); pure: hand-made
world states, no process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from rich.console import Console

from tableflow_core.config.loader import load_project
from tableflow_core.plan.builder import build_plan
from tableflow_core.plan.plan import Plan
from tableflow_core.plan.render_human import render_compact, render_human
from tableflow_core.plan.render_markdown import render_markdown
from tableflow_core.plan.world_state import ObservedTable, TopicState, WorldState
from tableflow_core.schemas.resolve import ResolvedSchema, schema_fingerprint
from tests.plan_project import write_project

VALUE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("email", pa.string()),
        pa.field("amount", pa.float64()),
    ]
)
MASK_EMAIL = {"type": "mask", "columns": ["email"], "method": "redact"}
MASK_ID = {"type": "mask", "columns": ["id"], "method": "redact"}


def resolved(schema: pa.Schema, subject: str = "orders-value") -> ResolvedSchema:
    return ResolvedSchema(schema, 11, 1, subject, schema_fingerprint(schema))


def plan_of(
    tmp_path: Path,
    schema: pa.Schema = VALUE,
    key_schema: pa.Schema | None = None,
    watermarks: dict[int, tuple[int, int]] | None = None,
    observed: ObservedTable | None = None,
    **table: Any,
) -> Plan:
    entry = {"name": "orders", "topic": "orders", "metadata_columns": [], **table}
    root = write_project(
        tmp_path / "p", bootstrap="127.0.0.1:1", registry_url="http://127.0.0.1:1",
        catalog_uri="http://127.0.0.1:1", credential="a:b", namespace="shop", tables=[entry],
    )  # fmt: skip
    project = load_project(root)
    world = WorldState(
        tables={"shop.orders": observed} if observed is not None else {},
        schemas={"orders": resolved(schema)},
        key_schemas={"orders": resolved(key_schema, "orders-key")} if key_schema else {},
        topics={"orders": TopicState("orders", watermarks or {0: (0, 10)})},
    )
    return build_plan(project, project.tables, world)


def shown(plan: Plan) -> str:
    console = Console(record=True, width=400)
    render_human(plan, console)
    render_compact(plan, console)
    return console.export_text() + render_markdown(plan)


def test_a_table_with_masks_and_a_dead_letter_target_keeps_masked_payloads_and_says_so(
    tmp_path: Path,
) -> None:
    dlq = {"type": "iceberg", "table": "ops.bad"}
    plan = plan_of(tmp_path, transforms=[MASK_EMAIL], on_error="dlq", dlq=dlq)
    assert not plan.blockers
    (warning,) = plan.warnings
    assert warning.table == "orders" and warning.key == "dlq" and warning.location
    assert (
        "keeps no key or value bytes" in warning.message and "dlq.payload: raw" in warning.message
    )
    ingest = next(a for a in plan.actions if a.kind == "ingest")
    assert ingest.spec.dead_letter_payload == "masked"  # type: ignore[union-attr]
    assert ingest.dead_letter == "iceberg table ops.bad (payload masked: no key or value bytes)"  # type: ignore[union-attr]
    text = shown(plan)
    assert text.count("keeps no key or value bytes") == 3  # human, compact, markdown

    raw = plan_of(tmp_path, transforms=[MASK_EMAIL], on_error="dlq", dlq={**dlq, "payload": "raw"})
    (warning,) = raw.warnings
    assert "dlq.payload: raw" in warning.message and "masked column(s) email" in warning.message
    ingest = next(a for a in raw.actions if a.kind == "ingest")
    assert ingest.spec.dead_letter_payload == "raw"  # type: ignore[union-attr]

    # without masks: raw bytes by default, nothing to warn about
    plain = plan_of(tmp_path, on_error="dlq", dlq=dlq)
    assert plain.warnings == ()
    ingest = next(a for a in plain.actions if a.kind == "ingest")
    assert ingest.spec.dead_letter_payload == "raw"  # type: ignore[union-attr]


def test_kafka_key_metadata_holding_a_masked_key_is_refused(tmp_path: Path) -> None:
    key = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    with_key = VALUE.append(pa.field("_kafka_key", pa.struct([pa.field("id", pa.int64())])))
    upsert = {"mode": "upsert", "key_columns": ["id"], "key": {"format": "avro"}}
    plan = plan_of(tmp_path, with_key, key, metadata_columns=["key"], transforms=[MASK_ID],
                   **upsert)  # fmt: skip
    (blocker,) = plan.blockers
    assert blocker.key == "metadata_columns" and blocker.location
    assert "_kafka_key" in blocker.message and "masked column(s) id" in blocker.message
    assert "drop key from metadata_columns" in blocker.message  # a struct cannot be masked

    # a string key on an upsert table: masking _kafka_key the same way is accepted
    string_key = {"mode": "upsert", "key_columns": ["email"], "key": {"format": "string"}}
    flat = VALUE.append(pa.field("_kafka_key", pa.string()))
    refused = plan_of(tmp_path, flat, metadata_columns=["key"], transforms=[MASK_EMAIL],
                      **string_key)  # fmt: skip
    assert [b.key for b in refused.blockers] == ["metadata_columns"]
    assert "mask _kafka_key with the same mask" in refused.blockers[0].message
    both = {**MASK_EMAIL, "columns": ["email", "_kafka_key"]}
    accepted = plan_of(tmp_path, flat, metadata_columns=["key"], transforms=[both], **string_key)
    assert not accepted.blockers and accepted.warnings == ()

    # an append table: whether the key holds a masked value is unknown, plan says so
    append = plan_of(tmp_path, flat, metadata_columns=["key"], transforms=[MASK_EMAIL])
    assert not append.blockers
    (warning,) = append.warnings
    assert "in clear in _kafka_key" in warning.message and "mask _kafka_key too" in warning.message


def test_a_key_schema_that_lets_a_key_field_be_null_is_warned_about(tmp_path: Path) -> None:
    upsert = {"mode": "upsert", "key_columns": ["id"], "key": {"format": "avro"}}
    nullable = pa.schema([pa.field("id", pa.int64(), nullable=True)])
    plan = plan_of(tmp_path, key_schema=nullable, on_error="skip", **upsert)
    (warning,) = plan.warnings
    assert warning.key == "key_columns" and "orders-key" in warning.message
    assert "key field(s) id be null" in warning.message and "on_error: skip" in warning.message
    required = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    assert plan_of(tmp_path, key_schema=required, **upsert).warnings == ()


def test_row_count_with_a_minimum_runs_on_a_run_with_no_new_records(tmp_path: Path) -> None:
    from tableflow_core.plan.shape import managed_properties
    from tableflow_core.schemas.evolution import iceberg_schema_for

    checks = [{"type": "row_count", "min": 1, "severity": "warn"}]
    root_plan = plan_of(tmp_path, checks=checks)
    table = load_project(tmp_path / "p").tables[0]
    observed = ObservedTable(
        identifier="shop.orders",
        schema=iceberg_schema_for(VALUE),
        schema_id=0,
        partition_by=(),
        properties=managed_properties(table),
        snapshot_id=5,
        committed={0: 10},
    )
    idle = plan_of(tmp_path, observed=observed, checks=checks)
    (ingest,) = [a for a in idle.actions if a.kind == "ingest"]
    assert ingest.records == 0 and ingest.ranges == ()  # type: ignore[union-attr]
    assert idle.has_changes and "no new records" in shown(idle)
    assert next(a for a in root_plan.actions if a.kind == "ingest").records == 10  # type: ignore[union-attr]
    # without a minimum, a table with no new records has nothing to do
    quiet = plan_of(tmp_path, observed=observed, checks=[{"type": "row_count", "max": 5}])
    assert not quiet.has_changes


def _record_schema(arrow_type: pa.DataType) -> pa.Schema:
    assert isinstance(arrow_type, pa.StructType)
    return pa.schema([arrow_type.field(i) for i in range(arrow_type.num_fields)])


def test_no_null_key_warning_for_a_key_schema_with_no_nullable_field(tmp_path: Path) -> None:
    """Issue 41: `{tenant: string, id: long}` was warned about ("lets key field(s) tenant, id
    be null"): nullability was read from the Arrow schema, where every field is nullable."""
    from tableflow_core.schemas.avro_types import map_avro_schema
    from tableflow_core.schemas.json_schema_types import map_json_schema

    upsert = {"mode": "upsert", "key_columns": ["tenant", "id"], "key": {"format": "avro"}}
    avro_key = {
        "type": "record",
        "name": "Key",
        "fields": [{"name": "tenant", "type": "string"}, {"name": "id", "type": "long"}],
    }
    strict = _record_schema(map_avro_schema(json.dumps(avro_key)).arrow_type)
    assert all(field.nullable for field in strict)  # as Arrow has it
    assert plan_of(tmp_path / "a", key_schema=strict, **upsert).warnings == ()
    avro_key["fields"][1]["type"] = ["null", "long"]
    loose = _record_schema(map_avro_schema(json.dumps(avro_key)).arrow_type)
    (warning,) = plan_of(tmp_path / "b", key_schema=loose, **upsert).warnings
    assert "key field(s) id be null" in warning.message

    json_key = {
        "type": "object",
        "properties": {"tenant": {"type": "string"}, "id": {"type": "integer"}},
        "required": ["tenant", "id"],
    }
    upsert["key"] = {"format": "json_schema"}
    strict = _record_schema(map_json_schema(json.dumps(json_key)).arrow_type)
    assert plan_of(tmp_path / "c", key_schema=strict, **upsert).warnings == ()
    json_key["required"] = ["tenant"]
    (warning,) = plan_of(
        tmp_path / "d", key_schema=_record_schema(map_json_schema(json.dumps(json_key)).arrow_type),
        **upsert,
    ).warnings  # fmt: skip
    assert "key field(s) id be null" in warning.message


def test_the_compact_plan_of_auto_approve_shows_records_lost(tmp_path: Path) -> None:
    """Issue 41: `apply --auto-approve` printed "ingest 5 records" and no "records lost"
    line for a table whose topic deleted records before it read them."""
    from tableflow_core.plan.shape import managed_properties
    from tableflow_core.schemas.evolution import iceberg_schema_for

    plan_of(tmp_path)
    table = load_project(tmp_path / "p").tables[0]
    observed = ObservedTable(
        identifier="shop.orders",
        schema=iceberg_schema_for(VALUE),
        schema_id=0,
        properties=managed_properties(table),
        snapshot_id=5,
        committed={0: 2},
    )
    plan = plan_of(tmp_path, observed=observed, watermarks={0: (5, 10)})
    console = Console(record=True, width=400)
    render_compact(plan, console)
    compact = console.export_text()
    lost = "records lost: topic 'orders' partition 0: offsets 2..4 (3 records)"
    assert "ingest 5 records" in compact and lost in compact, compact
    assert "apply fails unless the table sets `on_data_loss: accept`" in compact
    console = Console(record=True, width=400)
    render_human(plan, console)
    assert lost in console.export_text()  # plan shows it the same way
