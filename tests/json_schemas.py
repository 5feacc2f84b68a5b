"""JSON Schema documents for tests, written as one call: `json_object("Order", id="integer",
note={"type": ["string", "null"]}, required=["id"])` is the draft-07 object schema titled
`Order` with those properties, in that order.

A property's value is its JSON type name, or its whole schema (a dict: formats, nested
objects, arrays, unions). `required=` is a keyword, so no property may be called `required`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DRAFT_07 = "http://json-schema.org/draft-07/schema#"


def json_object(
    title: str, /, *, required: Sequence[str] = (), **properties: str | dict[str, Any]
) -> dict[str, Any]:
    """A draft-07 object schema (a dict, as `json.dumps` and the serializers take it)."""
    schema: dict[str, Any] = {
        "$schema": DRAFT_07,
        "title": title,
        "type": "object",
        "properties": {
            name: {"type": kind} if isinstance(kind, str) else kind
            for name, kind in properties.items()
        },
    }
    if required:
        schema["required"] = list(required)
    return schema
