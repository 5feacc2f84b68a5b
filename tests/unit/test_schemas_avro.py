"""Avro: type mapping (every row of docs/type-mapping.md) and decoding via the registry.

Bytes come from confluent-kafka's real AvroSerializer against the in-process mock registry.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.schemas.arrow_values import SchemaMappingError
from tableflow_core.schemas.avro_types import map_avro_schema
from tableflow_core.schemas.decoding import DecoderSpec, build_decoder, serialize_schema
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import SchemaResolutionError, resolve_schema

UTC = dt.UTC


def mock_registry() -> RegistrySettings:
    return RegistrySettings(url=f"mock://{uuid.uuid4().hex}")


def avro_bytes(
    registry: RegistrySettings, topic: str, schema: dict[str, Any], value: Any, key: bool = False
) -> bytes:
    serializer = AvroSerializer(registry.client(), json.dumps(schema))
    field = MessageField.KEY if key else MessageField.VALUE
    data = serializer(value, SerializationContext(topic, field))
    assert data is not None
    return data


def message(
    topic: str, offset: int, value: bytes | None, key: bytes | None = None, partition: int = 0
) -> KafkaMessage:
    return KafkaMessage(topic, partition, offset, 1_700_000_000_123, key, value, (("h", b"v"),))


def decode(
    registry: RegistrySettings,
    topic: str,
    target: pa.Schema,
    values: list[bytes | None],
    **spec: Any,
) -> Any:
    decoder = build_decoder(
        DecoderSpec(
            topic=topic,
            value=spec.get("value", FormatSpec(format="avro")),
            key=spec.get("key"),
            metadata_columns=spec.get("metadata", ()),
            registry=registry,
            target_schema_ipc=serialize_schema(target),
        )
    )
    return decoder.decode([message(topic, i, v) for i, v in enumerate(values)])


def record(fields: list[dict[str, Any]], name: str = "Row") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "test", "fields": fields}


# One row per line of the Avro table in docs/type-mapping.md:
# (avro type, expected Arrow type, a Python value for the serializer, expected Arrow value)
TS = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
LOCAL_TS = dt.datetime(2024, 5, 6, 7, 8, 9, 123456)
MAPPING_ROWS: list[tuple[str, Any, pa.DataType, Any, Any]] = [
    ("boolean", "boolean", pa.bool_(), True, True),
    ("int", "int", pa.int32(), -5, -5),
    ("long", "long", pa.int64(), 2**40, 2**40),
    ("float", "float", pa.float32(), 1.5, 1.5),
    ("double", "double", pa.float64(), 2.25, 2.25),
    ("string", "string", pa.string(), "héllo", "héllo"),
    ("bytes", "bytes", pa.binary(), b"\x00\x01", b"\x00\x01"),
    (
        "decimal_bytes",
        {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        pa.decimal128(10, 2),
        Decimal("12345678.91"),
        Decimal("12345678.91"),
    ),
    (
        "decimal_fixed",
        {
            "type": "fixed",
            "name": "D",
            "size": 8,
            "logicalType": "decimal",
            "precision": 18,
            "scale": 4,
        },
        pa.decimal128(18, 4),
        Decimal("-12.3456"),
        Decimal("-12.3456"),
    ),
    (
        "decimal_wide",
        {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 1},
        pa.string(),
        Decimal("1234567890123456789012345678901234567.8"),
        "1234567890123456789012345678901234567.8",
    ),
    (
        "date",
        {"type": "int", "logicalType": "date"},
        pa.date32(),
        dt.date(2024, 2, 29),
        dt.date(2024, 2, 29),
    ),
    (
        "time_millis",
        {"type": "int", "logicalType": "time-millis"},
        pa.int64(),
        dt.time(1, 2, 3, 4000),
        3_723_004_000,
    ),
    (
        "time_micros",
        {"type": "long", "logicalType": "time-micros"},
        pa.int64(),
        dt.time(1, 2, 3, 4005),
        3_723_004_005,
    ),
    (
        "ts_millis",
        {"type": "long", "logicalType": "timestamp-millis"},
        pa.timestamp("us", tz="UTC"),
        TS,
        TS.replace(microsecond=123000),
    ),
    (
        "ts_micros",
        {"type": "long", "logicalType": "timestamp-micros"},
        pa.timestamp("us", tz="UTC"),
        TS,
        TS,
    ),
    (
        "local_ts_millis",
        {"type": "long", "logicalType": "local-timestamp-millis"},
        pa.timestamp("us"),
        LOCAL_TS,
        LOCAL_TS.replace(microsecond=123000),
    ),
    (
        "local_ts_micros",
        {"type": "long", "logicalType": "local-timestamp-micros"},
        pa.timestamp("us"),
        LOCAL_TS,
        LOCAL_TS,
    ),
    (
        "uuid",
        {"type": "string", "logicalType": "uuid"},
        pa.string(),
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "12345678-1234-5678-1234-567812345678",
    ),
    ("nullable", ["null", "string"], pa.string(), None, None),
    ("int_or_long", ["null", "int", "long"], pa.int64(), 7, 7),
    (
        "multi_union",
        ["null", "int", "string"],
        pa.struct([("member0", pa.int32()), ("member1", pa.string())]),
        "x",
        {"member0": None, "member1": "x"},
    ),
    (
        "enum",
        {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]},
        pa.string(),
        "GREEN",
        "GREEN",
    ),
    ("fixed", {"type": "fixed", "name": "F4", "size": 4}, pa.binary(), b"abcd", b"abcd"),
    (
        "array",
        {"type": "array", "items": "long"},
        pa.list_(pa.field("element", pa.int64())),
        [1, 2],
        [1, 2],
    ),
    (
        "map",
        {"type": "map", "values": "int"},
        pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.int32())),
        {"a": 1},
        [("a", 1)],
    ),
    (
        "nested",
        record(
            [
                {"name": "x", "type": "int"},
                {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            ],
            "Inner",
        ),
        pa.struct([("x", pa.int32()), ("ts", pa.timestamp("us", tz="UTC"))]),
        {"x": 1, "ts": TS},
        {"x": 1, "ts": TS},
    ),
]


def test_every_mapping_row_maps_and_round_trips() -> None:
    registry = mock_registry()
    topic = "types"
    schema = record([{"name": name, "type": avro_type} for name, avro_type, *_ in MAPPING_ROWS])
    resolved = resolve_schema_after_register(registry, topic, schema)
    for name, _, arrow_type, _, _ in MAPPING_ROWS:
        field = resolved.field(name)
        assert field.type == arrow_type, name
        assert field.nullable, name
    value = {name: python for name, _, _, python, _ in MAPPING_ROWS}
    result = decode(registry, topic, resolved, [avro_bytes(registry, topic, schema, value)])
    assert result.failures == []
    row = result.batch.to_pylist()[0]
    for name, _, _, _, expected in MAPPING_ROWS:
        assert row[name] == expected, name
    # timestamp-* keep the instant (UTC), local-timestamp-* stay wall-clock
    assert row["ts_micros"].tzinfo is not None and row["local_ts_micros"].tzinfo is None


def resolve_schema_after_register(
    registry: RegistrySettings, topic: str, schema: dict[str, Any]
) -> pa.Schema:
    registry.client().register_schema(f"{topic}-value", Schema(json.dumps(schema), "AVRO"))
    return resolve_schema(topic, FormatSpec(format="avro"), None, (), registry).arrow_schema


def test_union_of_records_is_a_struct_of_members_named_by_position() -> None:
    registry = mock_registry()
    a = record([{"name": "a", "type": "int"}], "A")
    b = record([{"name": "b", "type": "string"}], "B")
    schema = record([{"name": "u", "type": ["null", a, b, "long"]}])
    target = resolve_schema_after_register(registry, "unions", schema)
    values = [{"u": ("test.B", {"b": "bee"})}, {"u": ("test.A", {"a": 1})}, {"u": 5}, {"u": None}]
    payloads = [avro_bytes(registry, "unions", schema, v) for v in values]
    result = decode(registry, "unions", target, payloads)
    assert result.failures == []
    assert [r["u"] for r in result.batch.to_pylist()] == [
        {"member0": None, "member1": {"b": "bee"}, "member2": None},
        {"member0": {"a": 1}, "member1": None, "member2": None},
        {"member0": None, "member1": None, "member2": 5},
        None,
    ]


def test_recursive_schema_is_a_clear_error() -> None:
    schema = record([{"name": "next", "type": ["null", "test.Row"]}])
    with pytest.raises(SchemaMappingError, match=r"recursive Avro type 'test.Row' at next"):
        map_avro_schema(json.dumps(schema))
    registry = mock_registry()
    registry.client().register_schema("rec-value", Schema(json.dumps(schema), "AVRO"))
    with pytest.raises(SchemaResolutionError, match="recursive"):
        resolve_schema("rec", FormatSpec(format="avro"), None, (), registry)


def test_missing_subject_is_a_resolution_error_naming_it() -> None:
    with pytest.raises(SchemaResolutionError, match="nope-value"):
        resolve_schema("nope", FormatSpec(format="avro"), None, (), mock_registry())


V1 = record([{"name": "id", "type": "long"}, {"name": "qty", "type": "int"}])
V2 = record(
    [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ]
)


def test_old_and_new_writers_decode_into_the_newer_target() -> None:
    registry = mock_registry()
    topic = "evolve"
    old = avro_bytes(registry, topic, V1, {"id": 1, "qty": 5})
    new = avro_bytes(registry, topic, V2, {"id": 2, "qty": 2**40, "note": "hi"})
    target = resolve_schema(topic, FormatSpec(format="avro"), None, (), registry).arrow_schema
    assert target.field("qty").type == pa.int64() and "note" in target.names
    result = decode(registry, topic, target, [old, new])
    assert result.failures == []
    assert result.batch.schema.equals(target)
    assert result.batch.to_pylist() == [
        {"id": 1, "qty": 5, "note": None},
        {"id": 2, "qty": 2**40, "note": "hi"},
    ]


def test_newer_writer_into_an_older_target_drops_the_new_field() -> None:
    registry = mock_registry()
    topic = "older-target"
    registry.client().register_schema(f"{topic}-value", Schema(json.dumps(V1), "AVRO"))
    target = resolve_schema(
        topic, FormatSpec(format="avro", version=1), None, (), registry
    ).arrow_schema
    new = avro_bytes(registry, topic, V2, {"id": 2, "qty": 9, "note": "hi"})
    result = decode(registry, topic, target, [new])
    assert result.batch.to_pylist() == [{"id": 2, "qty": 9}]


def test_value_that_does_not_fit_the_table_is_a_failure_not_a_lost_batch() -> None:
    registry = mock_registry()
    topic = "misfit"
    target = pa.schema([("id", pa.int64()), ("qty", pa.int32())])  # table column still int
    good = avro_bytes(registry, topic, V2, {"id": 1, "qty": 3, "note": None})
    too_big = avro_bytes(registry, topic, V2, {"id": 2, "qty": 2**40, "note": None})
    result = decode(registry, topic, target, [good, too_big])
    assert result.batch.to_pylist() == [{"id": 1, "qty": 3}]
    assert [(f.offset, f.value) for f in result.failures] == [(1, too_big)]
    assert "does not fit the table schema" in result.failures[0].reason


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda b: b"\x01" + b[1:], "magic byte 1"),
        (lambda b: b[:1] + (999_999).to_bytes(4, "big") + b[5:], "unknown schema id 999999"),
        (lambda b: b[:-3], "truncated"),
        (lambda b: b[:3], "shorter than the 5-byte Confluent header"),
        (lambda b: b + b"\x00\x00", "trailing bytes"),
    ],
)
def test_bad_records_become_failures_naming_the_record(mangle: Any, reason: str) -> None:
    registry = mock_registry()
    topic = "bad"
    good = avro_bytes(registry, topic, V2, {"id": 1, "qty": 3, "note": "some text"})
    target = pa.schema([("id", pa.int64()), ("qty", pa.int64()), ("note", pa.string())])
    decoder = build_decoder(
        DecoderSpec(topic, FormatSpec(format="avro"), None, (), registry, serialize_schema(target))
    )
    bad = mangle(good)
    result = decoder.decode(
        [message(topic, 41, good, partition=3), message(topic, 42, bad, key=b"k", partition=3)]
    )
    assert result.batch.num_rows == 1
    [failure] = result.failures
    assert (failure.topic, failure.partition, failure.offset, failure.key, failure.value) == (
        topic,
        3,
        42,
        b"k",
        bad,
    )
    assert reason in failure.reason
    assert failure.describe().startswith("bad[3]@42: ")


def test_metadata_columns_and_avro_key() -> None:
    registry = mock_registry()
    topic = "meta"
    key_schema = record([{"name": "user_id", "type": "long"}], "Key")
    key = avro_bytes(registry, topic, key_schema, {"user_id": 77}, key=True)
    value = avro_bytes(registry, topic, V1, {"id": 1, "qty": 2})
    metadata = ("topic", "partition", "offset", "timestamp", "key", "headers")
    resolved = resolve_schema(
        topic, FormatSpec(format="avro"), FormatSpec(format="avro"), metadata, registry
    )
    target = resolved.arrow_schema
    assert target.names == [
        "id",
        "qty",
        "_kafka_topic",
        "_kafka_partition",
        "_kafka_offset",
        "_kafka_timestamp",
        "_kafka_key",
        "_kafka_headers",
    ]
    assert resolved.registry_version == 1 and resolved.subject == f"{topic}-value"
    decoder = build_decoder(
        DecoderSpec(
            topic,
            FormatSpec(format="avro"),
            FormatSpec(format="avro"),
            metadata,
            registry,
            serialize_schema(target),
        )
    )
    result = decoder.decode(
        [message(topic, 9, value, key=key, partition=2), message(topic, 10, None, key=key)]
    )
    assert result.tombstones == 1
    [row] = result.batch.to_pylist()
    assert row == {
        "id": 1,
        "qty": 2,
        "_kafka_topic": topic,
        "_kafka_partition": 2,
        "_kafka_offset": 9,
        "_kafka_timestamp": dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC),
        "_kafka_key": {"user_id": 77},
        "_kafka_headers": [("h", b"v")],
    }


def test_fingerprint_is_stable_and_tracks_the_columns() -> None:
    registry = mock_registry()
    registry.client().register_schema("fp-value", Schema(json.dumps(V1), "AVRO"))
    first = resolve_schema("fp", FormatSpec(format="avro"), None, (), registry)
    again = resolve_schema("fp", FormatSpec(format="avro"), None, (), registry)
    registry.client().register_schema("fp-value", Schema(json.dumps(V2), "AVRO"))
    newer = resolve_schema("fp", FormatSpec(format="avro"), None, (), registry)
    assert first.fingerprint == again.fingerprint != newer.fingerprint
    assert (first.registry_version, newer.registry_version) == (1, 2)
