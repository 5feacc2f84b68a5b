"""The plan as versioned JSON (the same document `--out` saves); see docs/plan-json-schema.md."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from tableflow_core.plan.plan import Plan

SCHEMA_RESOURCE = "plan.schema.json"


def plan_document(plan: Plan) -> dict[str, Any]:
    document = plan.model_dump(mode="json")
    document["summary"] = plan.summary.model_dump(mode="json")
    document["has_changes"] = plan.has_changes
    return document


def render_json(plan: Plan, indent: int | None = 2) -> str:
    return json.dumps(plan_document(plan), indent=indent, sort_keys=False)


def generate_schema() -> dict[str, Any]:
    """The JSON Schema of a plan document, generated from the models."""
    from tableflow_core.plan.plan import Summary

    schema = Plan.model_json_schema(mode="serialization")
    defs = schema.setdefault("$defs", {})
    defs["Summary"] = Summary.model_json_schema()
    schema["properties"]["summary"] = {"$ref": "#/$defs/Summary"}
    schema["properties"]["has_changes"] = {"type": "boolean"}
    schema["required"] = sorted({*schema.get("required", []), "summary", "has_changes", "actions"})
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://tableflow.dev/schemas/plan-v2.json"
    schema["title"] = "tableflow plan (plan_format_version 2)"
    return schema


def shipped_schema() -> dict[str, Any]:
    """The schema file shipped in the package (tableflow_core/plan/schema/plan.schema.json)."""
    text = resources.files("tableflow_core.plan").joinpath("schema", SCHEMA_RESOURCE).read_text()
    return dict(json.loads(text))


if (
    __name__ == "__main__"
):  # python -m tableflow_core.plan.render_json > plan/schema/plan.schema.json
    print(json.dumps(generate_schema(), indent=2))
