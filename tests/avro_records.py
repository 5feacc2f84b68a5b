"""Avro record schemas for tests, written as one call: `avro_record("Order", id="long",
amount="double")` is the record `Order` with those fields, in that order.

A field's value is its Avro type, or `with_default(type, default)` / `nullable(type)`
(`["null", type]` with default null) for a field that carries a default. `namespace=` and
`properties=` (record-level keys such as Kafka Connect's `connect.name`) are keywords, so
no field may be called `namespace` or `properties`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WithDefault:
    """A field's type and its default (`"default"` in the field's schema)."""

    kind: Any
    default: Any


def with_default(kind: Any, default: Any) -> WithDefault:
    return WithDefault(kind, default)


def nullable(kind: Any) -> WithDefault:
    """`["null", kind]`, default null: the optional field as most producers write it."""
    return WithDefault(["null", kind], None)


def avro_field(name: str, kind: Any) -> dict[str, Any]:
    if isinstance(kind, WithDefault):
        return {"name": name, "type": kind.kind, "default": kind.default}
    return {"name": name, "type": kind}


def avro_record(
    record_name: str,
    /,
    *,
    namespace: str | None = None,
    properties: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """An Avro record schema (a dict, as `json.dumps` and fastavro take it)."""
    schema: dict[str, Any] = {"type": "record", "name": record_name}
    if namespace is not None:
        schema["namespace"] = namespace
    schema["fields"] = [avro_field(field, kind) for field, kind in fields.items()]
    return {**schema, **(properties or {})}


# The 10-field event record the throughput benchmarks measure (benchmarks/event_schema.py)
# and the decoders' tests read: `avro_record("Event", **EVENT_FIELDS)`.
EVENT_FIELDS: dict[str, Any] = {
    "id": "long",
    "user": "string",
    "amount": "double",
    "qty": "int",
    "active": "boolean",
    "at": {"type": "long", "logicalType": "timestamp-millis"},
    "city": nullable("string"),
    "score": "float",
    "kind": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]},
    "day": {"type": "int", "logicalType": "date"},
}
