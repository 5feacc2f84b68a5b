"""Regression tests of issue #12 for the dev Schema Registry: invalid Avro schemas,
bounded compatibility checks, request size limit, strict version parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tableflow_core.registry import compatibility
from tableflow_core.registry.compatibility import ParsedAvro, can_read
from tableflow_core.registry.schemas import parse_avro


def _record(name: str, fields: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": fields, **extra}


def layered_schema(depth: int, extra_field: bool = False) -> dict[str, Any]:
    """L0 is a leaf; each Li has two fields of type L(i-1), referenced by name."""
    leaf_fields: list[dict[str, Any]] = [{"name": "v", "type": "int"}]
    if extra_field:
        leaf_fields.append({"name": "w", "type": "int", "default": 0})
    schema: dict[str, Any] = _record("L0", leaf_fields)
    for level in range(1, depth + 1):
        previous = schema if level == 1 else f"L{level - 1}"
        schema = _record(
            f"L{level}",
            [{"name": "a", "type": schema if level > 1 else previous}, {"name": "b", "type": f"L{level - 1}"}],
        )  # fmt: skip
    return schema


def test_compatibility_check_is_linear_in_named_type_reuse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = 0
    original = compatibility._Resolver.check

    def counting(self: Any, writer: Any, reader: Any, path: str) -> Any:
        nonlocal calls
        calls += 1
        return original(self, writer, reader, path)

    monkeypatch.setattr(compatibility._Resolver, "check", counting)
    writer = ParsedAvro(*parse_avro(json.dumps(layered_schema(20))))
    reader = ParsedAvro(*parse_avro(json.dumps(layered_schema(20, extra_field=True))))
    assert can_read(writer, reader) == []
    assert calls < 200  # 2^20 before memoizing on named types
    # an incompatibility deep inside is still reported, once per record pair, bounded
    bad = layered_schema(20)
    reader = ParsedAvro(*parse_avro(json.dumps(bad).replace('"type": "int"', '"type": "string"')))
    problems = can_read(writer, reader)
    assert problems and len(problems) <= compatibility.MAX_PROBLEMS
    assert problems[0].error_type == "TYPE_MISMATCH"
