"""Reading many subjects' latest schemas in one registry answer: what the answer must look
like to be used, and which subjects a plan asks it for. Pure: no process."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from tableflow_core import catalog
from tableflow_core.config.loader import load_project
from tableflow_core.plan.world import listable_subjects
from tableflow_core.schemas.latest_schemas import common_prefix, parse_listing
from tests.plan_project import write_project


def entry(subject: str, version: int = 1, **extra: Any) -> dict[str, Any]:
    return {"subject": subject, "version": version, "id": 7, "schema": '"string"', **extra}


def test_a_listing_gives_the_wanted_subjects_as_the_client_parses_them() -> None:
    answer = [
        entry("a-value", 3),
        entry("b-value", schemaType="JSON", schema="{}"),
        entry("c-value", references=[{"name": "x.Y", "subject": "y", "version": 2}]),
        entry("other-value"),
    ]
    found = parse_listing(answer, {"a-value", "b-value", "c-value", "missing-value"})
    assert sorted(found) == ["a-value", "b-value", "c-value"]
    assert (found["a-value"].version, found["a-value"].schema_id) == (3, 7)
    assert found["b-value"].schema.schema_type == "JSON"
    reference = found["c-value"].schema.references[0]
    assert (reference.name, reference.subject, reference.version) == ("x.Y", "y", 2)


def test_an_answer_not_shaped_as_the_api_describes_is_not_used() -> None:
    wanted = {"a-value"}
    assert parse_listing({"error_code": 404}, wanted) == {}
    # an older registry's distinct schemas, without subjects
    assert parse_listing([{"id": 1, "schema": '"string"'}], wanted) == {}
    assert parse_listing([entry("a-value"), "x"], wanted) == {}
    # `latestOnly` ignored: two versions of one subject
    assert parse_listing([entry("a-value", 1), entry("a-value", 2)], wanted) == {}
    assert parse_listing([entry("a-value", version="1")], wanted) == {}


def test_common_prefix() -> None:
    assert common_prefix(["orders_eu-value", "orders_us-value", "orders_eu-key"]) == "orders_"
    assert common_prefix(["a", "b"]) == ""
    assert common_prefix(["same"]) == "same"
    assert common_prefix([]) == ""


def test_the_plan_lists_only_latest_text_subjects(tmp_path: Path) -> None:
    tables = [
        {"name": "a", "topic": "a"},  # avro by default
        {"name": "b", "topic": "b", "value": {"format": "json_schema", "subject": "shared"}},
        {"name": "c", "topic": "c", "value": {"format": "protobuf"}},  # format=serialized
        {"name": "d", "topic": "d", "value": {"format": "avro", "version": 3}},
        {"name": "e", "topic": "e", "value": {"format": "json"}},
        {"name": "f", "topic": "f", "key": {"format": "avro"}},
    ]
    root = write_project(
        tmp_path / "p", bootstrap="127.0.0.1:1", registry_url="http://127.0.0.1:1",
        catalog_uri="http://127.0.0.1:1", credential="a:b", namespace="shop", tables=tables,
    )  # fmt: skip
    project = load_project(root)
    assert listable_subjects(project.tables) == {"a-value", "shared", "f-value", "f-key"}


def test_the_catalog_package_names_load_when_used() -> None:
    """Importing the package loads no server module (plan imports `catalog.storage`)."""
    for name in catalog.__all__:
        module = importlib.import_module(f"tableflow_core.catalog.{catalog._EXPORTS[name]}")
        assert getattr(catalog, name) is getattr(module, name)
    assert set(catalog.__all__) == set(catalog._EXPORTS)
