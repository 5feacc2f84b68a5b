"""Avro record schemas for tests, written as one call: `avro_record("Order", id="long",
amount="double")` is the record `Order` with those fields, in that order."""

from __future__ import annotations

from typing import Any


def avro_record(record_name: str, /, **fields: Any) -> dict[str, Any]:
    """An Avro record schema (a dict, as `json.dumps` and fastavro take it)."""
    return {
        "type": "record",
        "name": record_name,
        "fields": [{"name": field, "type": kind} for field, kind in fields.items()],
    }
