"""Debezium's JSON with embedded schemas (`format: connect_json`, docs/cdc.md), no process.

The records are the bytes Connect's JsonConverter writes with `schemas.enable=true`
(tests/cdc_events.py: `{"schema": ..., "payload": ...}`, compact, Decimals as base64), and
real ones captured from Debezium 3.6.1.Final's PostgreSQL connector
(tests/data/debezium_connect_json.jsonl). The independent model is the Avro path: the
same changes serialized by confluent-kafka's AvroSerializer must land as the same table
columns and the same rows.
"""

from __future__ import annotations

import base64
import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tableflow_core.config.models.formats import Format
from tableflow_core.ingest.columns import BAD_RECORD_COLUMN, TOMBSTONE_COLUMN
from tableflow_core.kafka.latest_records import LatestRecord
from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.pipeline.decode_chunks import ChunkDecoder, KeySpec
from tableflow_core.schemas import connect_json
from tableflow_core.schemas.decoding import DecoderSpec, build_decoder, serialize_schema
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.resolve import SchemaResolutionError, resolve_schema
from tests.cdc_events import (
    TOPIC,
    Change,
    connect_decimal,
    connect_envelope_schema,
    connect_json_key,
    connect_json_value,
    row,
    to_partitions,
    workload,
)
from tests.cdc_model import after_image
from tests.unit.test_cdc import (
    MIRROR_METADATA,
    chunk_decoder,
    decode,
    events_of_every_kind,
    messages_of,
    register_and_encode,
    target,
)
from tests.unit.test_schemas_avro import mock_registry

VALUE = FormatSpec(format="connect_json", envelope="debezium")
JSON_KEY = FormatSpec(format="connect_json")
REAL_RECORDS = Path(__file__).parents[1] / "data" / "debezium_connect_json.jsonl"


def sample(value: bytes, key: bytes | None = None) -> LatestRecord:
    return LatestRecord(TOPIC, 0, 41, 1_767_225_600_000, key, value)


def json_target(
    value: bytes | None = None, metadata: tuple[str, ...] = MIRROR_METADATA
) -> pa.Schema:
    first = value or connect_json_value(events_of_every_kind()[0])
    return resolve_schema(TOPIC, VALUE, JSON_KEY, metadata, None, sample=sample(first)).arrow_schema


def json_decoder(schema: pa.Schema, mirror: bool) -> ChunkDecoder:
    spec = DecoderSpec(TOPIC, VALUE, JSON_KEY, (), None, serialize_schema(schema))
    key = KeySpec(JSON_KEY, ("id",), None) if mirror else None
    return ChunkDecoder(build_decoder(spec), schema, key, "run")


def encoded(
    changes: list[Change], schema: dict[str, Any] | None = None
) -> list[tuple[bytes, bytes | None]]:
    return [
        (
            connect_json_key(c.key),
            None if c.op == "tombstone" else connect_json_value(c, schema),
        )
        for c in changes
    ]


def bad_reasons(out: pa.Table) -> dict[int, str]:
    return {
        r["source_offset"]: r["error_message"]
        for r in out.column(BAD_RECORD_COLUMN).to_pylist()
        if r is not None
    }


def test_the_config_spelling_and_plain_json_with_an_envelope_refused() -> None:
    assert Format(format="connect_json", envelope="debezium").envelope == "debezium"
    with pytest.raises(ValueError, match="format: connect_json"):
        Format(format="json", envelope="debezium")


def test_the_embedded_envelope_resolves_to_the_avro_paths_columns() -> None:
    registry = mock_registry()
    register_and_encode(registry, events_of_every_kind()[:1])
    assert json_target() == target(registry)
    # The table's schema comes from the sampled record; without one plan cannot know it.
    with pytest.raises(SchemaResolutionError, match="no record with a value"):
        resolve_schema(TOPIC, VALUE, JSON_KEY, (), None)
    with pytest.raises(SchemaResolutionError, match=r"schemas\.enable=true"):
        resolve_schema(TOPIC, VALUE, JSON_KEY, (), None, sample=sample(b'{"id": 1}'))
    plain = json.dumps(
        {"schema": {"type": "struct", "fields": [{"type": "int32", "field": "id"}]},
         "payload": {"id": 1}}
    ).encode()  # fmt: skip
    with pytest.raises(SchemaResolutionError, match="not a Debezium change event envelope"):
        resolve_schema(TOPIC, VALUE, JSON_KEY, (), None, sample=sample(plain))


def semantic(name: str | None, kind: str, **extra: Any) -> dict[str, Any]:
    field = {"type": kind, "optional": True, **extra}
    if name is not None:
        field["name"] = name
    return field


# Debezium's semantic types (and Connect's logical ones), each with the column type the
# Avro path gives the same field (docs/cdc.md), a JSON value and the value that lands.
SEMANTIC_CASES: list[tuple[str, dict[str, Any], pa.DataType, Any, Any]] = [
    ("d", semantic("io.debezium.time.Date", "int32"), pa.date32(), 19723, "2024-01-01"),
    ("t_ms", semantic("io.debezium.time.Time", "int32"), pa.int64(), 3_600_000, 3_600_000_000),
    ("t_us", semantic("io.debezium.time.MicroTime", "int64"), pa.int64(), 5, 5),
    ("ts_ms", semantic("io.debezium.time.Timestamp", "int64"), pa.timestamp("us"), 1_000, "1970-01-01 00:00:01"),
    ("ts_us", semantic("io.debezium.time.MicroTimestamp", "int64"), pa.timestamp("us"), 1, "1970-01-01 00:00:00.000001"),
    ("ts_ns", semantic("io.debezium.time.NanoTimestamp", "int64"), pa.timestamp("us"), 3_000, "1970-01-01 00:00:00.000003"),
    ("tstz", semantic("io.debezium.time.ZonedTimestamp", "string"), pa.string(), "2024-01-01T10:00:00.5Z", "2024-01-01T10:00:00.5Z"),
    ("amount", semantic("org.apache.kafka.connect.data.Decimal", "bytes", parameters={"scale": "2", "connect.decimal.precision": "10"}), pa.decimal128(10, 2), connect_decimal(Decimal("-1234.56"), 2), Decimal("-1234.56")),
    ("wide", semantic("org.apache.kafka.connect.data.Decimal", "bytes", parameters={"scale": "0"}), pa.string(), connect_decimal(Decimal("123456789012345678901234567890123456789012"), 0), "123456789012345678901234567890123456789012"),
    ("var", semantic("io.debezium.data.VariableScaleDecimal", "struct", fields=[
        {"type": "int32", "optional": False, "field": "scale"},
        {"type": "bytes", "optional": False, "field": "value"}]),
     pa.struct([pa.field("scale", pa.int32()), pa.field("value", pa.binary())]),
     {"scale": 3, "value": base64.b64encode(b"\x30\x39").decode()}, {"scale": 3, "value": b"09"}),
    ("doc", semantic("io.debezium.data.Json", "string"), pa.string(), '{"a": 1}', '{"a": 1}'),
    ("uid", semantic("io.debezium.data.Uuid", "string"), pa.string(), "2b7c1d2e-0000-4000-8000-000000000001", "2b7c1d2e-0000-4000-8000-000000000001"),
    ("raw", semantic(None, "bytes"), pa.binary(), base64.b64encode(b"\x00\xff").decode(), b"\x00\xff"),
    ("small", semantic(None, "int16"), pa.int32(), -7, -7),
    ("price", semantic(None, "double"), pa.float64(), 2.25, 2.25),
    ("ratio", semantic(None, "float"), pa.float32(), 0.5, 0.5),
    ("tags", semantic(None, "array", items={"type": "string", "optional": True}), pa.list_(pa.string()), ["a", None], ["a", None]),
    ("counts", semantic(None, "map", keys={"type": "string", "optional": False}, values={"type": "int64", "optional": True}),
     pa.map_(pa.string(), pa.int64()), {"x": 1}, [("x", 1)]),
    ("cts", semantic("org.apache.kafka.connect.data.Timestamp", "int64"), pa.timestamp("us", tz="UTC"), 1_000, "1970-01-01 00:00:01+00:00"),
]  # fmt: skip


def test_debezium_semantic_types_map_and_land_as_the_avro_path_maps_them() -> None:
    fields = [{**schema, "field": name} for name, schema, *_ in SEMANTIC_CASES]
    envelope_schema = connect_envelope_schema(fields)
    after = {name: value for name, _, _, value, _ in SEMANTIC_CASES}
    change = Change("c", 1, None, row(1, "a", "1.00"), 10, 5, 70)
    value = connect_json_value(change, envelope_schema)
    document = json.loads(value)
    document["payload"]["after"].update(after)
    value = json.dumps(document, separators=(",", ":")).encode()
    schema = json_target(value, ())
    for name, _, column_type, _, _ in SEMANTIC_CASES:
        got = schema.field(name).type
        assert got.equals(column_type) or str(got) == str(column_type), (name, got)
    out = decode(json_decoder(schema, mirror=False), messages_of([(connect_json_key(1), value)]))
    assert not bad_reasons(out)
    landed = out.to_pylist()[0]
    for name, _, column_type, _, expected in SEMANTIC_CASES:
        want = (
            pa.array([expected]).cast(column_type)[0].as_py()
            if isinstance(expected, str) and column_type != pa.string()
            else expected
        )
        assert landed[name] == want, name


def test_the_mirror_and_changelog_land_as_the_avro_path_lands_the_same_changes() -> None:
    registry = mock_registry()
    changes = events_of_every_kind()
    avro_messages = messages_of(register_and_encode(registry, changes))
    json_messages = messages_of(encoded(changes))
    schema = json_target()
    for mirror in (True, False):
        from_avro = decode(chunk_decoder(registry, target(registry), mirror), avro_messages)
        from_json = decode(json_decoder(schema, mirror), json_messages)
        assert from_json.drop_columns([BAD_RECORD_COLUMN]) == from_avro.drop_columns(
            [BAD_RECORD_COLUMN]
        )
        reasons = bad_reasons(from_json)
        assert sorted(reasons) == sorted(bad_reasons(from_avro)) == [5, 6]
        assert "truncate event (op 't')" in reasons[5]


def test_a_random_workload_decodes_as_the_avro_path_decodes_it() -> None:
    rng = random.Random(7)
    registry = mock_registry()
    changes, _ = workload(rng, keys=20, transactions=40)
    avro = to_partitions(register_and_encode(registry, changes), changes, partitions=3)
    embedded = to_partitions(encoded(changes), changes, partitions=3)
    from_avro = decode(chunk_decoder(registry, target(registry), True), avro)
    from_json = decode(json_decoder(json_target(), True), embedded)
    assert from_json.num_rows == len(changes) + 10  # the replayed stretch included
    # Kafka timestamps: `to_partitions` stamps each call's records with the clock.
    assert from_json.drop_columns(["__tf_timestamp"]) == from_avro.drop_columns(["__tf_timestamp"])


def test_a_record_whose_embedded_schema_does_not_fit_the_table_is_a_bad_record() -> None:
    change = Change("u", 1, None, row(1, "x", "2.50"), 10, 5, 70)
    planned = json_target()
    channel = {"type": "string", "optional": True, "field": "channel"}
    added = connect_envelope_schema([channel])  # ALTER TABLE ADD COLUMN, not yet planned
    fields = connect_envelope_schema()["fields"][1]["fields"]
    wider = [dict(f, parameters={"scale": "2", "connect.decimal.precision": "12"})
             if f["field"] == "balance" else f for f in fields]  # fmt: skip
    narrower = [dict(f, type="int16") if f["field"] == "id" else f for f in fields]

    def with_after(after_fields: list[dict[str, Any]]) -> dict[str, Any]:
        schema = connect_envelope_schema()
        for image in schema["fields"][:2]:
            image["fields"] = after_fields
        return schema

    values = [
        connect_json_value(change, added),
        connect_json_value(change, with_after(wider)),
        connect_json_value(change, with_after(narrower)),  # int16 into an int column: fits
        json.dumps({"before": None, "after": {"id": 1}, "op": "c"}).encode(),  # schemaless
        connect_json_value(change)[:-9] + b"}",  # truncated
    ]
    out = decode(
        json_decoder(planned, mirror=True),
        messages_of([(connect_json_key(1), v) for v in values]),
    )
    reasons = bad_reasons(out)
    assert sorted(reasons) == [0, 1, 3, 4]
    assert "field 'channel' (string), which the table lacks" in reasons[0]
    assert "'balance' type decimal128(12, 2), the table's column is decimal128(10, 2)" in reasons[1]
    assert "schemas.enable=true" in reasons[3]
    assert "invalid JSON" in reasons[4]
    # Planned again from a record of the new schema, the table has the column: it fits.
    evolved = json_target(values[0])
    assert "channel" in evolved.names
    out = decode(json_decoder(evolved, True), messages_of([(connect_json_key(1), values[0])]))
    assert not bad_reasons(out) and out.num_rows == 1


def test_the_schema_split_needs_the_converters_layout_or_parses_the_whole_document() -> None:
    value = connect_json_value(events_of_every_kind()[0])
    text, schema, payload = connect_json.split(value)
    assert json.loads(text) == schema == connect_envelope_schema()
    assert payload["op"] == "r"
    spaced = json.dumps(json.loads(value), indent=1).encode()  # another writer's layout
    _, schema2, payload2 = connect_json.split(spaced)
    assert (schema2, payload2) == (schema, payload)


def test_records_captured_from_debezium_decode_as_the_independent_model_reads_them() -> None:
    """Records written by Debezium 3.6.1.Final's PostgreSQL connector through Connect's
    JsonConverter in the end-to-end test (customers, orders, order_items: numeric(12,2),
    timestamp, boolean, bigint keys, a two-column key; orders' `channel` column added
    mid-stream; snapshot reads, inserts, updates, deletes, tombstones). Each lands as
    tests/cdc_model.py (written from Debezium's documentation) reads it."""
    captured = [json.loads(line) for line in REAL_RECORDS.read_text().splitlines()]
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for record in captured:
        by_topic.setdefault(record["topic"], []).append(record)
    assert sorted(by_topic) == ["customers", "order_items", "orders"]

    def raw(text: str | None) -> bytes | None:
        return None if text is None else text.encode("utf-8")

    for topic, records in by_topic.items():
        # The newest schema (the most fields) is what plan reads from the latest record.
        newest = max((r for r in records if r["value"]), key=lambda r: len(r["value"]))
        latest = LatestRecord(topic, 0, 0, 0, raw(newest["key"]), raw(newest["value"]) or b"")
        schema = resolve_schema(topic, VALUE, JSON_KEY, (), None, sample=latest).arrow_schema
        key_columns = tuple(json.loads(records[0]["key"])["payload"])
        spec = DecoderSpec(topic, VALUE, JSON_KEY, (), None, serialize_schema(schema))
        decoder = ChunkDecoder(
            build_decoder(spec), schema, KeySpec(JSON_KEY, key_columns, None), "run"
        )
        messages = [
            KafkaMessage(topic, r["partition"], r["offset"], 1, raw(r["key"]), raw(r["value"]))
            for r in records
        ]
        out = decode(decoder, messages)
        assert not bad_reasons(out), topic
        landed = {(r["__tf_partition"], r["__tf_offset"]): r for r in out.to_pylist()}
        assert len(landed) == len(records)
        for record in records:
            got = landed[(record["partition"], record["offset"])]
            key = json.loads(record["key"])["payload"]
            assert {c: got[c] for c in key_columns} == key, topic
            if record["value"] is None:
                assert got[TOMBSTONE_COLUMN]
                continue
            op, after, _ = after_image(raw(record["value"]) or b"")
            if op == "d":
                assert got[TOMBSTONE_COLUMN]
                continue
            assert after is not None
            assert {c: got[c] for c in after} == after, (topic, record["offset"])
            missing = set(schema.names) - set(after)  # an older record: the added column
            assert all(got[c] is None for c in missing)
