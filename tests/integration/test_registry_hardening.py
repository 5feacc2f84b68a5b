"""Regression tests of issue #12 for the dev Schema Registry: invalid Avro schemas,
bounded compatibility checks, request size limit, strict version parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from tests.fixtures.stack import SchemaRegistryServer, unique_name
from tests.unit.test_registry_hardening import layered_schema

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def _post(url: str, body: Any, **kwargs: Any) -> requests.Response:
    return requests.post(
        url, data=json.dumps(body), headers={"Content-Type": CONTENT_TYPE}, timeout=60, **kwargs
    )


def _register(registry: SchemaRegistryServer, subject: str, schema: Any) -> requests.Response:
    return _post(f"{registry.url}/subjects/{subject}/versions", {"schema": json.dumps(schema)})


def _record(name: str, fields: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": fields, **extra}


INVALID_AVRO = {
    "duplicate field names": _record("R", [{"name": "a", "type": "int"}, {"name": "a", "type": "long"}]),
    "duplicate union branches": _record("R", [{"name": "a", "type": ["null", "int", "int"]}]),
    "duplicate named union branches": _record("R", [{"name": "a", "type": [
        {"type": "fixed", "name": "F", "size": 2}, "F"]}]),
    "nested union": _record("R", [{"name": "a", "type": ["null", ["int", "string"]]}]),
    "invalid record name": _record("1R", []),
    "invalid field name": _record("R", [{"name": "a-b", "type": "int"}]),
    "invalid namespace": _record("R", [], namespace="a..b"),
    "negative fixed size": {"type": "fixed", "name": "F", "size": -1},
    "fixed size not an integer": {"type": "fixed", "name": "F", "size": "4"},
    "invalid enum symbol": {"type": "enum", "name": "E", "symbols": ["a-b"]},
    "duplicate enum symbols": {"type": "enum", "name": "E", "symbols": ["A", "A"]},
}  # fmt: skip

VALID_AVRO = {
    "named types in a union": ["null", {"type": "fixed", "name": "F", "size": 0},
                               {"type": "enum", "name": "E", "symbols": ["A"]}],
    "dotted name": _record("a.b.R", [{"name": "x", "type": ["null", "string"]}]),
    "same field name in nested records": _record("R", [
        {"name": "a", "type": _record("S", [{"name": "a", "type": "int"}])}]),
    "two arrays are not a duplicate when nested": _record("R", [
        {"name": "a", "type": {"type": "array", "items": ["null", "int"]}}]),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(INVALID_AVRO))
def test_invalid_avro_is_42201(schema_registry: SchemaRegistryServer, case: str) -> None:
    response = _register(schema_registry, unique_name("bad"), INVALID_AVRO[case])
    assert response.status_code == 422, response.text
    assert response.json()["error_code"] == 42201


@pytest.mark.parametrize("case", sorted(VALID_AVRO))
def test_valid_avro_still_registers(schema_registry: SchemaRegistryServer, case: str) -> None:
    response = _register(schema_registry, unique_name("good"), VALID_AVRO[case])
    assert response.status_code == 200, response.text


def test_deeply_reused_schema_registers_over_http(schema_registry: SchemaRegistryServer) -> None:
    subject = unique_name("layers")
    assert _register(schema_registry, subject, layered_schema(20)).status_code == 200
    second = _register(schema_registry, subject, layered_schema(20, extra_field=True))
    assert second.status_code == 200, second.text
    assert second.json()["id"] > 0


def test_oversized_request_is_413(schema_registry: SchemaRegistryServer) -> None:
    huge = {"schema": json.dumps({"type": "string", "doc": "x" * (17 * 1024 * 1024)})}
    response = _post(f"{schema_registry.url}/subjects/{unique_name('big')}/versions", huge)
    assert response.status_code == 413
    assert response.json()["error_code"] == 413

    def chunks() -> Any:  # no Content-Length: the limit holds while streaming too
        for _ in range(17):
            yield b" " * (1024 * 1024)

    streamed = requests.post(
        f"{schema_registry.url}/subjects/{unique_name('big')}/versions",
        data=chunks(),
        headers={"Content-Type": CONTENT_TYPE},
        timeout=60,
    )
    assert streamed.status_code == 413
    assert requests.get(f"{schema_registry.url}/subjects", timeout=10).status_code == 200


@pytest.mark.parametrize(
    "version", [" 1", "1 ", "1_0", "+1", "01", "1.0", "0", "-2", "2147483648", "\uff11", "latest "]
)
def test_version_is_parsed_strictly(schema_registry: SchemaRegistryServer, version: str) -> None:
    subject = unique_name("v")
    assert _register(schema_registry, subject, {"type": "string"}).status_code == 200
    quoted = requests.utils.quote(version, safe="")
    url = f"{schema_registry.url}/subjects/{subject}/versions/{quoted}"
    for method in ("GET", "DELETE"):
        response = requests.request(method, url, timeout=10)
        assert response.status_code == 422, (method, response.text)
        assert response.json()["error_code"] == 42202
    # nothing was soft-deleted by the refused DELETE
    versions = requests.get(f"{schema_registry.url}/subjects/{subject}/versions", timeout=10)
    assert versions.json() == [1]


@pytest.mark.parametrize("version", ["1", "latest", "-1"])
def test_valid_versions_still_work(schema_registry: SchemaRegistryServer, version: str) -> None:
    subject = unique_name("v")
    assert _register(schema_registry, subject, {"type": "string"}).status_code == 200
    response = requests.get(
        f"{schema_registry.url}/subjects/{subject}/versions/{version}", timeout=10
    )
    assert response.status_code == 200 and response.json()["version"] == 1


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"schema": '"string"', "schemaType": 1}, 422, 42201),
        ({"schema": '"string"', "schemaType": ["AVRO"]}, 422, 42201),
        ({"schema": "[" * 100_000}, 422, 42201),
        ({"schema": "[" * 100_000, "schemaType": "JSON"}, 422, 42201),
    ],
)
def test_malformed_register_bodies_are_4xx(
    schema_registry: SchemaRegistryServer, body: dict[str, Any], status: int, code: int
) -> None:
    response = _post(f"{schema_registry.url}/subjects/{unique_name('m')}/versions", body)
    assert response.status_code == status, response.text
    assert response.json()["error_code"] == code


def test_deeply_nested_request_body_is_400(schema_registry: SchemaRegistryServer) -> None:
    response = requests.post(
        f"{schema_registry.url}/subjects/{unique_name('m')}/versions",
        data="[" * 100_000,
        headers={"Content-Type": CONTENT_TYPE},
        timeout=30,
    )
    assert response.status_code == 400, response.text


@pytest.mark.parametrize("schema_id", ["0", "-1", "99999999999999999999999"])
def test_out_of_range_schema_ids_are_404(
    schema_registry: SchemaRegistryServer, schema_id: str
) -> None:
    for suffix in ("", "/schema", "/versions", "/subjects"):
        response = requests.get(
            f"{schema_registry.url}/schemas/ids/{schema_id}{suffix}", timeout=10
        )
        assert response.status_code == 404, (suffix, response.text)
        assert response.json()["error_code"] == 40403
