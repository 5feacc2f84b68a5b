"""Pure Avro compatibility rules (no server)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tableflow_core.registry.compatibility import (
    CompatibilityLevel,
    ParsedAvro,
    can_read,
    check_level,
)
from tableflow_core.registry.schemas import parse_avro
from tests.avro_records import avro_record, nullable


def _avro(schema: Any) -> ParsedAvro:
    return ParsedAvro(*parse_avro(json.dumps(schema)))


def _record(*fields: dict[str, Any], name: str = "Order") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "shop", "fields": list(fields)}


ID = {"name": "id", "type": "string"}


def _compatible(writer: Any, reader: Any) -> bool:
    return not can_read(_avro(writer), _avro(reader))


@pytest.mark.parametrize(
    ("writer", "reader", "ok"),
    [
        ("int", "long", True),
        ("int", "double", True),
        ("long", "float", True),
        ("float", "double", True),
        ("long", "int", False),
        ("double", "float", False),
        ("string", "bytes", True),
        ("bytes", "string", True),
        ("string", "int", False),
        ("int", ["null", "long"], True),
        (["null", "int"], ["null", "long"], True),
        (["null", "string", "int"], ["null", "string"], False),
        (["null", "string"], "string", False),
        ({"type": "array", "items": "int"}, {"type": "array", "items": "long"}, True),
        ({"type": "map", "values": "long"}, {"type": "map", "values": "int"}, False),
    ],
)
def test_type_resolution(writer: Any, reader: Any, ok: bool) -> None:
    assert (
        _compatible(
            _record(ID, {"name": "v", "type": writer}), _record(ID, {"name": "v", "type": reader})
        )
        is ok
    )


def test_added_field_needs_a_default_to_read_old_data() -> None:
    old = _record(ID)
    without_default = _record(ID, {"name": "qty", "type": "int"})
    with_default = _record(ID, {"name": "qty", "type": "int", "default": 0})
    problems = can_read(_avro(old), _avro(without_default))
    assert [p.error_type for p in problems] == ["READER_FIELD_MISSING_DEFAULT_VALUE"]
    assert "qty" in problems[0].description
    assert not can_read(_avro(old), _avro(with_default))


def test_removed_field_without_default_breaks_forward_only() -> None:
    old = _record(ID, {"name": "qty", "type": "int"})
    new = _record(ID)
    assert check_level(CompatibilityLevel.BACKWARD, _avro(new), [_avro(old)]) == []
    assert check_level(CompatibilityLevel.FORWARD, _avro(new), [_avro(old)])
    assert check_level(CompatibilityLevel.FULL, _avro(new), [_avro(old)])
    assert check_level(CompatibilityLevel.NONE, _avro(new), [_avro(old)]) == []


def test_enum_symbols() -> None:
    small = {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}
    large = {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}
    large_with_default = {**large, "default": "NEW"}
    field = lambda t: _record(ID, {"name": "status", "type": t})  # noqa: E731
    assert _compatible(field(small), field(large))
    assert not _compatible(field(large), field(small))
    assert _compatible(field(large_with_default), field({**small, "default": "NEW"}))


def test_nested_records_and_named_references() -> None:
    address_v1 = {
        "type": "record",
        "name": "Address",
        "fields": [{"name": "city", "type": "string"}],
    }
    address_v2 = {
        "type": "record",
        "name": "Address",
        "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "string"}],
    }
    old = _record(
        ID, {"name": "ship", "type": address_v1}, {"name": "bill", "type": ["null", "Address"]}
    )
    new = _record(
        ID, {"name": "ship", "type": address_v2}, {"name": "bill", "type": ["null", "Address"]}
    )
    problems = can_read(_avro(old), _avro(new))
    assert problems and all(p.error_type == "READER_FIELD_MISSING_DEFAULT_VALUE" for p in problems)
    assert _compatible(new, old)  # dropping zip on read is fine


def test_decimal_scale_change_is_incompatible() -> None:
    dec = lambda p, s: {"type": "bytes", "logicalType": "decimal", "precision": p, "scale": s}  # noqa: E731
    assert _compatible(
        _record(ID, {"name": "a", "type": dec(10, 2)}),
        _record(ID, {"name": "a", "type": dec(10, 2)}),
    )
    assert not _compatible(
        _record(ID, {"name": "a", "type": dec(10, 2)}),
        _record(ID, {"name": "a", "type": dec(10, 3)}),
    )


def test_recursive_schema_terminates() -> None:
    node = avro_record("Node", v="int", next=nullable("Node"))
    assert _compatible(node, node)


def test_transitive_checks_every_version() -> None:
    v1 = _record(ID, {"name": "a", "type": "int"})
    v2 = _record(ID, {"name": "a", "type": "int", "default": 0})
    v3 = _record(ID)  # forward-incompatible with v1 only through v1's missing default
    assert check_level(CompatibilityLevel.FORWARD, _avro(v3), [_avro(v1), _avro(v2)]) == []
    assert check_level(CompatibilityLevel.FORWARD_TRANSITIVE, _avro(v3), [_avro(v1), _avro(v2)])
