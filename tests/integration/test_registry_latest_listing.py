"""Many subjects' latest schemas in one request (`schemas/latest_schemas.py`), against the
real registry server: the listing gives exactly what `versions/latest` gives, subject by
subject, and the plan's schemas resolve the same either way."""

from __future__ import annotations

import json

import pytest
import requests
from confluent_kafka.schema_registry import Schema, SchemaReference

from tableflow_core.schemas import latest_schemas
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.latest_schemas import MIN_SUBJECTS, read_latest_schemas
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import resolve_schema
from tests.fixtures.stack import SchemaRegistryServer, unique_name


def _record(name: str, *fields: str, namespace: str = "shop") -> Schema:
    return Schema(
        json.dumps(
            {
                "type": "record",
                "name": name,
                "namespace": namespace,
                "fields": [{"name": "id", "type": "long"}]
                + [{"name": f, "type": ["null", "string"], "default": None} for f in fields],
            }
        )
    )


@pytest.fixture(scope="module")
def subjects(schema_registry: SchemaRegistryServer) -> list[str]:
    """MIN_SUBJECTS + 8 subjects under one prefix: every fifth has a second version, the
    last references another subject's type, and one more subject's only version is
    soft-deleted."""
    client = schema_registry.client()
    prefix = unique_name("listing").replace("-", "_")
    names = [f"{prefix}_{i:03d}-value" for i in range(MIN_SUBJECTS + 8)]
    for i, subject in enumerate(names[:-1]):
        client.register_schema(subject, _record(f"T{i}", "a"))
        if i % 5 == 0:
            client.register_schema(subject, _record(f"T{i}", "a", "b"))
    address_subject = f"{prefix}_address"
    client.register_schema(address_subject, _record("Address", "street", namespace="geo"))
    with_reference = Schema(
        json.dumps(
            {
                "type": "record",
                "name": "Customer",
                "namespace": "shop",
                "fields": [{"name": "id", "type": "long"}, {"name": "home", "type": "geo.Address"}],
            }
        ),
        "AVRO",
        [SchemaReference("geo.Address", address_subject, 1)],
    )
    client.register_schema(names[-1], with_reference)
    gone = f"{prefix}_gone-value"
    client.register_schema(gone, _record("Gone"))
    client.delete_subject(gone)
    return names


def test_the_listing_gives_each_subjects_latest_version(
    schema_registry: SchemaRegistryServer, subjects: list[str]
) -> None:
    settings = RegistrySettings(url=schema_registry.url)
    client = settings.client()
    listed = read_latest_schemas(settings, subjects)
    assert sorted(listed) == sorted(subjects)
    for subject in subjects:
        one = client.get_version(subject, "latest")
        got = listed[subject]
        assert (got.subject, got.version, got.schema_id) == (
            one.subject,
            one.version,
            one.schema_id,
        )
        assert got.schema.schema_str == one.schema.schema_str
        assert got.schema.schema_type == one.schema.schema_type
        assert got.schema.references == one.schema.references
    assert listed[subjects[0]].version == 2 and listed[subjects[1]].version == 1
    assert listed[subjects[-1]].schema.references  # kept, for the mapper to fetch


def test_the_server_answers_the_listing_as_the_api_describes(
    schema_registry: SchemaRegistryServer, subjects: list[str]
) -> None:
    prefix = subjects[0].rsplit("_", 1)[0]
    url = f"{schema_registry.url}/schemas"
    every = requests.get(url, params={"subjectPrefix": prefix}).json()
    latest = requests.get(url, params={"subjectPrefix": prefix, "latestOnly": "true"}).json()
    # 40 subjects + the address subject; every fifth of the 39 plain ones has 2 versions
    assert len(latest) == len(subjects) + 1
    assert len(every) == len(latest) + len(range(0, len(subjects) - 1, 5))
    assert all({"subject", "version", "id", "schema"} <= set(e) for e in every)
    assert not any(e["subject"].endswith("_gone-value") for e in every)
    with_deleted = requests.get(url, params={"subjectPrefix": prefix, "deleted": "true"}).json()
    assert any(e["subject"].endswith("_gone-value") for e in with_deleted)
    page = requests.get(url, params={"subjectPrefix": prefix, "offset": 2, "limit": 3}).json()
    assert page == every[2:5]
    assert requests.get(url, params={"limit": "many"}).status_code == 400


def test_few_subjects_or_a_crowded_prefix_are_read_one_by_one(
    schema_registry: SchemaRegistryServer, subjects: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = RegistrySettings(url=schema_registry.url)
    assert read_latest_schemas(settings, subjects[: MIN_SUBJECTS - 1]) == {}
    monkeypatch.setattr(latest_schemas, "MAX_LISTED_PER_WANTED", 0)
    assert read_latest_schemas(settings, subjects) == {}


def test_a_registry_that_is_down_leaves_the_error_to_the_subject_reads() -> None:
    down = RegistrySettings(url="http://127.0.0.1:9")
    assert read_latest_schemas(down, [f"s{i}-value" for i in range(MIN_SUBJECTS)]) == {}


def test_schemas_resolve_the_same_from_the_listing(
    schema_registry: SchemaRegistryServer, subjects: list[str]
) -> None:
    settings = RegistrySettings(url=schema_registry.url)
    listed = read_latest_schemas(settings, subjects)
    value = FormatSpec(format="avro")
    for subject in subjects:
        topic = subject.removesuffix("-value")
        one_by_one = resolve_schema(topic, value, None, ("offset",), settings)
        from_listing = resolve_schema(topic, value, None, ("offset",), settings, latest=listed)
        assert from_listing == one_by_one
