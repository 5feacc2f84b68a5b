"""Issue #32: schema bombs. A reused named type / $ref / message that expands to 2^N
columns, and schemas nested hundreds deep, are refused fast with the schema's subject,
version and the path where the limit was reached. Pure unit tests (the in-process mock
registry of confluent-kafka), no process."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor
from google.protobuf.descriptor_pool import DescriptorPool

from tableflow_core.schemas import avro_types, json_schema_types, protobuf_types
from tableflow_core.schemas.arrow_values import SchemaMappingError
from tableflow_core.schemas.expansion import MAX_COLUMNS, MAX_DEPTH, check_expansion
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import SchemaResolutionError, resolve_schema

LEVELS = 20  # 2^20 = 1M columns once expanded
FAST = 2.0  # seconds; before the bounds these took from seconds to minutes


def avro_bomb(levels: int) -> str:
    schema: dict[str, Any] = {
        "type": "record",
        "name": "T0",
        "fields": [{"name": "a", "type": "int"}],
    }
    for i in range(1, levels + 1):
        schema = {
            "type": "record",
            "name": f"T{i}",
            "fields": [{"name": "x", "type": schema}, {"name": "y", "type": f"T{i - 1}"}],
        }
    return json.dumps(schema)


def json_schema_bomb(levels: int) -> str:
    definitions: dict[str, Any] = {
        "d0": {"type": "object", "properties": {"a": {"type": "integer"}}}
    }
    for i in range(1, levels + 1):
        ref = {"$ref": f"#/definitions/d{i - 1}"}
        definitions[f"d{i}"] = {"type": "object", "properties": {"x": ref, "y": ref}}
    return json.dumps({"definitions": definitions, "$ref": f"#/definitions/d{levels}"})


def proto_bomb(levels: int, fields: tuple[str, ...] = ("x", "y")) -> Descriptor:
    kind = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="bomb.proto", package="b", syntax="proto3")
    proto.message_type.add(name="M0").field.add(
        name="a", number=1, type=kind.TYPE_INT32, label=kind.LABEL_OPTIONAL
    )
    for i in range(1, levels + 1):
        message = proto.message_type.add(name=f"M{i}")
        for number, name in enumerate(fields, start=1):
            message.field.add(
                name=name, number=number, type=kind.TYPE_MESSAGE, type_name=f".b.M{i - 1}",
                label=kind.LABEL_OPTIONAL,
            )  # fmt: skip
    pool = DescriptorPool()
    pool.Add(proto)
    return pool.FindMessageTypeByName(f"b.M{levels}")


def nested_json_schema_text(levels: int) -> str:
    # Built as text: json.dumps itself overflows the stack on the deepest ones.
    return '{"type":"object","properties":{"c":' * levels + '{"type":"integer"}' + "}}" * levels


def nested_avro(levels: int) -> str:
    text = '{"type":"record","name":"R0","fields":[{"name":"a","type":"int"}]}'
    for i in range(1, levels + 1):  # as text, for the same reason
        text = f'{{"type":"record","name":"R{i}","fields":[{{"name":"c","type":["null",{text}]}}]}}'
    return text


def timed_refusal(map_schema: Any, *args: Any) -> str:
    # CPU time, not wall time: the expansion is CPU work, and a loaded machine (the suite
    # beside other jobs) stretched a 0.1 s refusal past 2 s of wall time.
    start = time.process_time()
    with pytest.raises(SchemaMappingError) as refused:
        map_schema(*args)
    assert time.process_time() - start < FAST
    return str(refused.value)


@pytest.mark.parametrize(
    ("map_schema", "bomb"),
    [
        (avro_types.map_avro_schema, lambda: avro_bomb(LEVELS)),
        (json_schema_types.map_json_schema, lambda: json_schema_bomb(LEVELS)),
        (protobuf_types.map_message, lambda: proto_bomb(LEVELS)),
    ],
    ids=["avro", "json_schema", "protobuf"],
)
def test_a_reused_type_that_expands_to_2_to_the_n_columns_is_refused_fast(
    map_schema: Any, bomb: Any
) -> None:
    message = timed_refusal(map_schema, bomb())
    assert f"expands to more than {MAX_COLUMNS:,} columns" in message
    assert "the limit was reached at x.x.x" in message  # where, as a column path


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 300, 5000])
def test_deep_nesting_is_refused_not_a_recursion_error(levels: int) -> None:
    for map_schema, schema in (
        (json_schema_types.map_json_schema, nested_json_schema_text(levels)),
        (protobuf_types.map_message, proto_bomb(levels, fields=("c",))),
    ):
        message = timed_refusal(map_schema, schema)
        assert f"nests more than {MAX_DEPTH} levels deep" in message
    message = timed_refusal(avro_types.map_avro_schema, nested_avro(levels))
    assert f"nests more than {MAX_DEPTH} levels deep" in message


def test_schemas_within_the_limits_map() -> None:
    assert avro_types.map_avro_schema(avro_bomb(11)).arrow_type.num_fields == 2  # 6,142 columns
    assert json_schema_types.map_json_schema(nested_json_schema_text(MAX_DEPTH - 1)).is_record
    assert protobuf_types.map_message(proto_bomb(11)).arrow_type.num_fields == 2
    assert avro_types.map_avro_schema(nested_avro(MAX_DEPTH - 1)).is_record
    wide = {
        "type": "object",
        "properties": {f"c{i}": {"type": "string"} for i in range(MAX_COLUMNS)},
    }
    assert json_schema_types.map_json_schema(json.dumps(wide)).arrow_type.num_fields == MAX_COLUMNS


def test_check_expansion_costs_at_most_the_limit() -> None:
    leaf = pa.struct([pa.field("a", pa.int32())])
    shared = leaf
    for _ in range(60):  # 2^60 columns, one shared Arrow type per level
        shared = pa.struct([pa.field("x", shared), pa.field("y", shared)])
    start = time.process_time()  # CPU, not wall: a loaded machine must not fail it
    with pytest.raises(SchemaMappingError, match="columns"):
        check_expansion(shared)
    assert time.process_time() - start < 0.5


def test_plan_names_the_subject_version_and_path() -> None:
    registry = RegistrySettings(url=f"mock://expansion-{uuid.uuid4().hex}")
    topic = "bombs"
    registry.client().register_schema(f"{topic}-value", Schema(avro_bomb(LEVELS), "AVRO"))
    with pytest.raises(SchemaResolutionError) as refused:
        resolve_schema(topic, FormatSpec(format="avro"), None, (), registry)
    message = str(refused.value)
    assert "topic 'bombs': value schema (subject 'bombs-value' version 1)" in message
    assert "expands to more than 10,000 columns" in message and "x.x.x" in message
