"""Issue #32: catalog requests that were answered 500 are 4xx, with no traceback logged.

A real server on a thread of this process (no child process), plain HTTP.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from pydantic import SecretStr

from tableflow_core.catalog import CatalogServerSettings, serve_in_background
from tableflow_core.catalog.field_defaults import schema_default_problems
from tableflow_core.catalog.runner import RunningCatalogServer
from tests.fixtures.catalog import CatalogApi


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCatalogServer]:
    settings = CatalogServerSettings(
        warehouse=tmp_path_factory.mktemp("bad-input") / "wh",
        client_secret=SecretStr("bad-input-secret"),
        access_log=False,
    )
    with serve_in_background(settings) as running:
        yield running


@pytest.fixture(scope="module")
def api(server: RunningCatalogServer) -> CatalogApi:
    api = CatalogApi(server.uri, server.bearer_token())
    assert api.call("POST", "/namespaces", json={"namespace": ["n"]}).status_code == 200
    table = {"name": "t", "schema": {"type": "struct", "fields": [field(1, "a", "int")]}}
    assert api.call("POST", "/namespaces/n/tables", json=table).status_code == 200
    return api


def field(field_id: int, name: str, field_type: Any, **extra: Any) -> dict[str, Any]:
    return {"id": field_id, "name": name, "required": False, "type": field_type, **extra}


MAP = {"type": "map", "key-id": 3, "key": "string", "value-id": 4, "value": "int",
       "value-required": False}  # fmt: skip
STRUCT = {"type": "struct", "fields": [field(3, "x", "int")]}
LIST = {"type": "list", "element-id": 3, "element": "int", "element-required": False}


def assert_4xx(response: requests.Response, status: int, *needles: str) -> None:
    assert response.status_code == status, response.text
    message = response.json()["error"]["message"]
    for needle in needles:
        assert needle in message, message


@pytest.fixture
def no_traceback(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.ERROR)
    yield
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


@pytest.mark.parametrize(
    ("field_type", "key", "value", "needle"),
    [
        (MAP, "initial-default", {"a": 1}, "a map field can only default to null"),
        (STRUCT, "write-default", {"3": 1}, "a struct field can only default to null"),
        (STRUCT, "initial-default", {}, "a struct field can only default to null"),
        (LIST, "write-default", [1], "a list field can only default to null"),
        ("int", "initial-default", "abc", "must be a JSON integer"),
        ("int", "initial-default", 2**40, "out of range"),
        ("binary", "write-default", 5, "must be a JSON string"),
        ("binary", "write-default", "zz", "hexadecimal"),
        ("date", "initial-default", [1], "must be a JSON string"),
        ("date", "initial-default", "2024-13-45", "month must be in 1..12"),
        ("decimal(9,2)", "initial-default", "abc", "must be a decimal number"),
        # pyiceberg scaled this one for minutes, holding the request thread
        ("decimal(9,2)", "initial-default", "1e999999999", "does not fit decimal(9,2)"),
        ("decimal(9,2)", "write-default", "1.5", "exactly 2 decimal places"),
        ("decimal(4,2)", "write-default", "123.45", "does not fit"),
    ],
)
def test_field_defaults_that_do_not_fit_are_400_on_create_and_add_schema(
    api: CatalogApi, no_traceback: None, field_type: Any, key: str, value: Any, needle: str
) -> None:
    bad_field = field(2, "d", field_type, **{key: value})
    schema = {"type": "struct", "fields": [field(1, "a", "int"), bad_field]}
    created = api.call("POST", "/namespaces/n/tables", json={"name": "t2", "schema": schema})
    assert_4xx(created, 400, needle)
    assert key in created.json()["error"]["message"]
    update = {"action": "add-schema", "schema": {**schema, "schema-id": 1}}
    committed = api.call(
        "POST", "/namespaces/n/tables/t", json={"requirements": [], "updates": [update]}
    )
    assert_4xx(committed, 400, needle)
    assert api.call("HEAD", "/namespaces/n/tables/t2").status_code == 404


def test_defaults_that_fit_are_accepted(api: CatalogApi) -> None:
    schema = {
        "type": "struct",
        "schema-id": 1,
        "fields": [
            field(1, "a", "int"),
            field(2, "i", "int", **{"initial-default": 5, "write-default": 6}),
            field(3, "d", "date", **{"initial-default": "2024-02-29"}),
            field(4, "b", "binary", **{"write-default": "00ff"}),
            field(7, "m", "decimal(9, 2)", **{"write-default": "-1234567.89"}),
            field(5, "s", {"type": "struct", "fields": [field(6, "x", "int")]}),
        ],
    }
    update = {"action": "add-schema", "schema": schema}
    committed = api.call(
        "POST", "/namespaces/n/tables/t", json={"requirements": [], "updates": [update]}
    )
    assert committed.status_code == 200, committed.text
    fields = committed.json()["metadata"]["schemas"][-1]["fields"]
    assert fields[1]["initial-default"] == 5 and fields[3]["write-default"] == "00ff"


@pytest.mark.parametrize("value", ["x", [1], 5, None])
def test_properties_and_updates_that_are_not_objects_are_400(
    api: CatalogApi, no_traceback: None, value: Any
) -> None:
    schema = {"type": "struct", "fields": [field(1, "a", "int")]}
    create = {"name": "t3", "schema": schema, "properties": value}
    assert_4xx(api.call("POST", "/namespaces/n/tables", json=create), 400, "properties")
    update = {"action": "set-properties", "updates": value}
    committed = api.call(
        "POST", "/namespaces/n/tables/t", json={"requirements": [], "updates": [update]}
    )
    assert_4xx(committed, 400, "set-properties")
    transaction = {
        "table-changes": [
            {
                "identifier": {"namespace": ["n"], "name": "t"},
                "requirements": [],
                "updates": [update],
            }
        ]
    }
    assert_4xx(api.call("POST", "/transactions/commit", json=transaction), 400)
    namespace = {"namespace": ["m"], "properties": value}
    assert_4xx(api.call("POST", "/namespaces", json=namespace), 400, "properties")
    assert_4xx(api.call("POST", "/namespaces/n/properties", json={"updates": value}), 400)


@pytest.mark.parametrize("signature", ["\u00e9t\u00e9", "\u2603", "a\u00ff"])
def test_bearer_token_with_a_non_ascii_signature_is_401(
    server: RunningCatalogServer, no_traceback: None, signature: str
) -> None:
    token = server.bearer_token()
    forged = token.rsplit(".", 1)[0] + "." + signature
    response = requests.get(
        server.uri + "/v1/namespaces",
        headers={"Authorization": f"Bearer {forged}".encode()},
        timeout=10,
    )
    assert_4xx(response, 401, "Malformed bearer token")


def test_default_problems_walk_nested_types_without_recursion() -> None:
    deep: dict[str, Any] = {"type": "struct", "fields": [field(1, "leaf", "int")]}
    for level in range(5000):  # deeper than Python's recursion limit
        deep = {"type": "struct", "fields": [field(level + 2, f"s{level}", deep)]}
    assert schema_default_problems(deep) == []
    nested = {"type": "struct", "fields": [field(1, "m", {**MAP, "value": STRUCT})]}
    nested["fields"][0]["type"]["value"]["fields"][0]["initial-default"] = "x"
    assert schema_default_problems(nested) == [
        "field 'm.value.x' initial-default: must be a JSON integer"
    ]
