"""The registry's REST API against the real server process, via confluent-kafka's client and raw HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from tableflow_core.dev.processes import free_port
from tableflow_core.dev.registry import registry_url, start_registry
from tests.fixtures.stack import SchemaRegistryServer, unique_name

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def _record(*extra_fields: dict[str, Any], name: str = "Order") -> Schema:
    fields = [{"name": "id", "type": "string"}, *extra_fields]
    return Schema(
        json.dumps({"type": "record", "name": name, "namespace": "shop", "fields": fields})
    )


QTY = {"name": "qty", "type": "int"}
QTY_DEFAULT = {"name": "qty", "type": "int", "default": 0}


def _error(exc_info: pytest.ExceptionInfo[SchemaRegistryError]) -> tuple[int, int]:
    return exc_info.value.http_status_code, exc_info.value.error_code


def test_ids_are_global_and_stable(schema_registry: SchemaRegistryServer) -> None:
    client = schema_registry.client()
    a, b = unique_name("a"), unique_name("b")
    first = client.register_schema(a, _record(name=unique_name("T").replace("-", "_")))
    schema = client.get_schema(first)
    assert client.register_schema(b, schema) == first  # same schema, other subject: same id
    assert client.register_schema(a, schema) == first  # same subject again: no new version
    assert client.get_versions(a) == [1]
    assert sorted(client.get_subjects_by_schema_id(first)) == sorted([a, b])
    reformatted = Schema(json.dumps(json.loads(schema.schema_str), indent=4))
    assert (
        SchemaRegistryClient({"url": schema_registry.url}).register_schema(b, reformatted) == first
    )


def test_incompatible_v2_is_rejected_with_409(schema_registry: SchemaRegistryServer) -> None:
    client = schema_registry.client()
    subject = unique_name("orders-value")
    client.register_schema(subject, _record())
    with pytest.raises(SchemaRegistryError) as exc_info:
        client.register_schema(subject, _record(QTY))
    assert _error(exc_info) == (409, 409)
    assert "qty" in exc_info.value.error_message
    assert client.test_compatibility(subject, _record(QTY)) is False
    assert client.test_compatibility(subject, _record(QTY_DEFAULT)) is True
    new_id = client.register_schema(subject, _record(QTY_DEFAULT))
    latest = client.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, new_id)


def test_compatibility_endpoint_reports_messages(schema_registry: SchemaRegistryServer) -> None:
    subject = unique_name("msgs")
    schema_registry.client().register_schema(subject, _record())
    response = requests.post(
        f"{schema_registry.url}/compatibility/subjects/{subject}/versions/latest",
        data=json.dumps(_record(QTY).to_dict()),
        headers={"Content-Type": CONTENT_TYPE},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(CONTENT_TYPE)
    body = response.json()
    assert body["is_compatible"] is False
    assert any("READER_FIELD_MISSING_DEFAULT_VALUE" in m for m in body["messages"])


def test_subject_level_config(schema_registry: SchemaRegistryServer) -> None:
    client = schema_registry.client()
    subject = unique_name("cfg")
    client.register_schema(subject, _record(QTY))
    with pytest.raises(SchemaRegistryError) as exc_info:
        client.get_compatibility(subject)
    assert _error(exc_info) == (404, 40408)
    client.set_compatibility(subject, "FORWARD")
    assert client.get_compatibility(subject) == "FORWARD"
    assert client.get_compatibility() == "BACKWARD"  # global untouched
    # Adding a field without default is FORWARD compatible; removing qty (no default) is not.
    client.register_schema(subject, _record(QTY, {"name": "sku", "type": "string"}))
    with pytest.raises(SchemaRegistryError):
        client.register_schema(subject, _record({"name": "sku", "type": "string"}))
    client.set_compatibility(subject, "NONE")
    client.register_schema(subject, _record({"name": "sku", "type": "string"}))
    assert client.get_versions(subject) == [1, 2, 3]
    with pytest.raises(SchemaRegistryError) as exc_info:
        client.set_compatibility(subject, "SIDEWAYS")
    assert _error(exc_info) == (422, 42203)


def test_error_shapes(schema_registry: SchemaRegistryServer) -> None:
    client = schema_registry.client()
    subject = unique_name("errs")
    with pytest.raises(SchemaRegistryError) as exc_info:
        client.get_latest_version(subject)
    assert _error(exc_info) == (404, 40401)
    assert exc_info.value.error_message == f"Subject '{subject}' not found."
    client.register_schema(subject, _record())
    with pytest.raises(SchemaRegistryError) as exc_info:
        client.get_version(subject, 7)
    assert _error(exc_info) == (404, 40402)
    with pytest.raises(SchemaRegistryError) as exc_info:
        client.get_schema(987654)
    assert _error(exc_info) == (404, 40403)
    with pytest.raises(SchemaRegistryError) as exc_info:
        client.register_schema(
            subject, Schema('{"type": "record", "name": "X", "fields": [{"name": 1}]}')
        )
    assert _error(exc_info) == (422, 42201)
    response = requests.get(f"{schema_registry.url}/subjects/{subject}/versions/zero")
    assert (response.status_code, response.json()["error_code"]) == (422, 42202)


def test_soft_and_permanent_delete(schema_registry: SchemaRegistryServer) -> None:
    client = schema_registry.client()
    subject = unique_name("del")
    schema_id = client.register_schema(subject, _record())
    client.register_schema(subject, _record(QTY_DEFAULT))
    with pytest.raises(SchemaRegistryError) as exc_info:
        client.delete_version(subject, 1, permanent=True)
    assert _error(exc_info) == (404, 40407)
    assert client.delete_version(subject, 1) == 1
    assert client.get_versions(subject) == [2]
    assert client.get_versions(subject, deleted=True) == [1, 2]
    assert client.get_version(subject, 1, deleted=True).schema_id == schema_id
    assert client.delete_subject(subject) == [2]
    assert subject not in client.get_subjects()
    assert subject in client.get_subjects(deleted=True)
    assert client.get_schema(schema_id).schema_str  # ids stay readable for old data
    assert client.delete_subject(subject, permanent=True) == [1, 2]
    assert subject not in client.get_subjects(deleted=True)


def test_raw_endpoints(schema_registry: SchemaRegistryServer) -> None:
    subject = unique_name("raw")
    schema = _record(name=unique_name("Raw").replace("-", "_"))
    schema_id = schema_registry.client().register_schema(subject, schema)
    url = schema_registry.url
    assert requests.get(f"{url}/").json() == {}
    assert set(requests.get(f"{url}/schemas/types").json()) == {"AVRO", "JSON", "PROTOBUF"}
    raw = requests.get(f"{url}/subjects/{subject}/versions/1/schema")
    assert json.loads(raw.text) == json.loads(schema.schema_str or "")
    assert requests.get(f"{url}/schemas/ids/{schema_id}/versions").json() == [
        {"subject": subject, "version": 1}
    ]
    assert requests.get(f"{url}/schemas/ids/{schema_id}", params={"subject": subject}).json()[
        "schema"
    ]
    found = requests.post(f"{url}/subjects/{subject}", json=schema.to_dict()).json()
    assert (found["subject"], found["version"], found["id"]) == (subject, 1, schema_id)


def test_avro_references(schema_registry: SchemaRegistryServer) -> None:
    client = schema_registry.client()
    address_subject = unique_name("address")
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "shop",
        "fields": [{"name": "city", "type": "string"}],
    }
    client.register_schema(address_subject, Schema(json.dumps(address)))
    order = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "id", "type": "string"}, {"name": "ship_to", "type": "shop.Address"}],
    }
    refs = [SchemaReference("shop.Address", address_subject, 1)]
    subject = unique_name("orders-value")
    schema_id = client.register_schema(subject, Schema(json.dumps(order), "AVRO", refs))
    fetched = SchemaRegistryClient({"url": schema_registry.url}).get_schema(schema_id)
    assert [r.subject for r in fetched.references or []] == [address_subject]
    with pytest.raises(SchemaRegistryError) as exc_info:
        client.register_schema(unique_name("x"), Schema(json.dumps(order), "AVRO", []))
    assert _error(exc_info) == (422, 42201)  # unknown type shop.Address without the reference


def test_data_survives_restart(tmp_path: Path) -> None:
    database = tmp_path / "registry.db"
    port = free_port()
    process = start_registry("127.0.0.1", port, database, tmp_path / "log")
    try:
        client = SchemaRegistryClient({"url": registry_url("127.0.0.1", port)})
        first = client.register_schema("orders-value", _record())
        client.set_compatibility("orders-value", "FULL")
    finally:
        process.stop()
    port = free_port()
    process = start_registry("127.0.0.1", port, database, tmp_path / "log")
    try:
        client = SchemaRegistryClient({"url": registry_url("127.0.0.1", port)})
        assert client.get_latest_version("orders-value").schema_id == first
        assert client.get_compatibility("orders-value") == "FULL"
        assert client.register_schema("other-value", _record(name="Other")) == first + 1
    finally:
        process.stop()


def test_basic_auth(tmp_path: Path) -> None:
    password = "s3cret-" + unique_name("pw")
    port = free_port()
    log_file = tmp_path / "log"
    process = start_registry(
        "127.0.0.1",
        port,
        tmp_path / "r.db",
        log_file,
        basic_auth_user="dev",
        basic_auth_password=password,
    )
    try:
        url = registry_url("127.0.0.1", port)
        response = requests.get(f"{url}/subjects")
        assert response.status_code == 401 and response.json()["error_code"] == 40101
        assert requests.get(f"{url}/subjects", auth=("dev", "wrong")).status_code == 401
        with pytest.raises(SchemaRegistryError) as exc_info:
            SchemaRegistryClient({"url": url}).get_subjects()
        assert exc_info.value.http_status_code == 401
        client = SchemaRegistryClient({"url": url, "basic.auth.user.info": f"dev:{password}"})
        assert client.register_schema("s-value", _record()) == 1
        assert client.get_subjects() == ["s-value"]
    finally:
        process.stop()
    assert password not in log_file.read_text()


def test_subjects_with_a_slash(schema_registry: SchemaRegistryServer) -> None:
    """Protobuf imports are registered under their file name, e.g. `acme/common.proto`."""
    client = schema_registry.client()
    subject = f"acme/{unique_name('common')}.proto"
    schema_id = client.register_schema(subject, _record(name="Common"))
    assert client.get_subjects().count(subject) == 1
    latest = client.get_latest_version(subject)
    assert (latest.subject, latest.schema_id, latest.version) == (subject, schema_id, 1)
    assert client.get_versions(subject) == [1]
    # Deleting version 1 of the subject must not be read as deleting a subject "…/versions/1".
    assert client.delete_version(subject, 1) == 1
    assert subject not in client.get_subjects()
