"""The REST catalog's HTTP contract, checked with plain HTTP against the real server process."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests

from tests.fixtures.catalog import (
    CatalogApi,
    CatalogServer,
    client_credentials_grant,
    new_namespace,
    unique_namespace,
)

SEP = "\x1f"  # namespace level separator in paths (sent as %1F)


class Client(CatalogApi):
    def __init__(self, server: CatalogServer) -> None:
        body = client_credentials_grant(server.uri, server.client_id, server.client_secret)
        assert body["token_type"] == "bearer" and body["expires_in"] > 0
        super().__init__(server.uri, body["access_token"])


@pytest.fixture(scope="module")
def client(catalog_server: CatalogServer) -> Client:
    return Client(catalog_server)


def assert_error(response: requests.Response, status: int, error_type: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status and error["type"] == error_type and error["message"]


def test_missing_or_bad_token_is_401(catalog_server: CatalogServer) -> None:
    assert_error(
        requests.get(catalog_server.uri + "/v1/config", timeout=10), 401, "NotAuthorizedException"
    )
    bad = requests.get(
        catalog_server.uri + "/v1/namespaces",
        headers={"Authorization": "Bearer tfc1.x.1.y"},
        timeout=10,
    )
    assert_error(bad, 401, "NotAuthorizedException")


def test_the_api_schema_needs_the_token_too(client: Client, catalog_server: CatalogServer) -> None:
    # issue 41: /openapi.json was served without a token on an authenticated catalog
    for path in ("/openapi.json", "/docs", "/redoc"):
        response = requests.get(catalog_server.uri + path, timeout=10)
        assert response.status_code in (401, 404), (path, response.status_code)
        assert "openapi" not in response.text.lower(), path
    assert_error(
        requests.get(catalog_server.uri + "/openapi.json", timeout=10),
        401,
        "NotAuthorizedException",
    )
    schema = requests.get(
        catalog_server.uri + "/openapi.json",
        headers={"Authorization": client.headers["Authorization"]},
        timeout=10,
    )
    assert schema.status_code == 200 and "/v1/namespaces" in schema.json()["paths"]


def test_wrong_client_secret_gets_oauth_error(catalog_server: CatalogServer) -> None:
    response = requests.post(
        catalog_server.uri + "/v1/oauth/tokens",
        data={
            "grant_type": "client_credentials",
            "client_id": catalog_server.client_id,
            "client_secret": "nope",
        },
        timeout=10,
    )
    assert response.status_code == 401 and response.json()["error"] == "invalid_client"


def test_config_lists_endpoints(client: Client) -> None:
    config = client.call("GET", "/config", params={"warehouse": "anything"}).json()
    assert "POST /v1/{prefix}/transactions/commit" in config["endpoints"]
    assert config["defaults"]["io-impl"] == "org.apache.iceberg.hadoop.HadoopFileIO"
    assert config["overrides"] == {}


def test_namespace_lifecycle(client: Client) -> None:
    ns = unique_namespace()
    created = client.call(
        "POST", "/namespaces", json={"namespace": [ns], "properties": {"a": "1", "b": "2"}}
    )
    assert created.json() == {"namespace": [ns], "properties": {"a": "1", "b": "2"}}
    assert_error(
        client.call("POST", "/namespaces", json={"namespace": [ns]}), 409, "AlreadyExistsException"
    )
    assert client.call("POST", "/namespaces", json={"namespace": [ns, "child"]}).status_code == 200
    assert client.call("HEAD", f"/namespaces/{ns}").status_code == 204
    assert client.call("HEAD", f"/namespaces/{ns}_missing").status_code == 404

    children = client.call("GET", "/namespaces", params={"parent": ns}).json()["namespaces"]
    assert children == [[ns, "child"]]
    assert [ns] in client.call("GET", "/namespaces").json()["namespaces"]
    assert_error(
        client.call("GET", "/namespaces", params={"parent": ns + "_nope"}),
        404,
        "NoSuchNamespaceException",
    )

    summary = client.call(
        "POST",
        f"/namespaces/{ns}/properties",
        json={"removals": ["a", "zz"], "updates": {"c": "3"}},
    ).json()
    assert summary == {"removed": ["a"], "updated": ["c"], "missing": ["zz"]}
    assert client.call("GET", f"/namespaces/{ns}").json()["properties"] == {"b": "2", "c": "3"}
    overlap = client.call(
        "POST", f"/namespaces/{ns}/properties", json={"removals": ["b"], "updates": {"b": "x"}}
    )
    assert_error(overlap, 422, "UnprocessableEntityException")

    # Removing every property must not make the namespace disappear.
    client.call("POST", f"/namespaces/{ns}/properties", json={"removals": ["b", "c"]})
    assert client.call("GET", f"/namespaces/{ns}").json()["properties"] == {}

    assert client.call("DELETE", f"/namespaces/{ns}{SEP}child").status_code == 204
    assert client.call("DELETE", f"/namespaces/{ns}").status_code == 204
    assert_error(client.call("GET", f"/namespaces/{ns}"), 404, "NoSuchNamespaceException")


def test_table_errors(client: Client, catalog_server: CatalogServer) -> None:
    ns = unique_namespace()
    client.call("POST", "/namespaces", json={"namespace": [ns]})
    assert_error(client.call("GET", f"/namespaces/{ns}/tables/nope"), 404, "NoSuchTableException")
    assert client.call("HEAD", f"/namespaces/{ns}/tables/nope").status_code == 404
    assert_error(client.call("GET", f"/namespaces/{ns}_x/tables"), 404, "NoSuchNamespaceException")
    assert_error(
        client.call("POST", f"/namespaces/{ns}/tables", json={"name": "t"}),
        400,
        "BadRequestException",
    )
    assert_error(
        client.call(
            "POST", f"/namespaces/{ns}/tables/nope", json={"requirements": [], "updates": []}
        ),
        404,
        "NoSuchTableException",
    )

    catalog = catalog_server.pyiceberg_catalog()
    catalog.create_table((ns, "t"), pa.schema([("id", pa.int64())]))
    assert_error(client.call("DELETE", f"/namespaces/{ns}"), 409, "NamespaceNotEmptyException")
    stale = {"requirements": [{"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}],
             "updates": [{"action": "set-properties", "updates": {"k": "v"}}]}  # fmt: skip
    assert_error(
        client.call("POST", f"/namespaces/{ns}/tables/t", json=stale), 409, "CommitFailedException"
    )
    assert "k" not in catalog.load_table((ns, "t")).properties


def test_load_table_and_views_and_metrics(client: Client, catalog_server: CatalogServer) -> None:
    catalog = catalog_server.pyiceberg_catalog()
    ns = new_namespace(catalog)
    catalog.create_table((ns, "t"), pa.schema([("id", pa.int64())]))
    loaded = client.call("GET", f"/namespaces/{ns}/tables/t").json()
    assert loaded["metadata-location"].startswith("file://")
    assert loaded["metadata"]["format-version"] == 2 and "config" in loaded
    assert client.call("GET", f"/namespaces/{ns}/tables").json()["identifiers"] == [
        {"namespace": [ns], "name": "t"}
    ]
    assert client.call("GET", f"/namespaces/{ns}/views").json() == {"identifiers": []}
    assert_error(client.call("GET", f"/namespaces/{ns}/views/v"), 404, "NoSuchViewException")
    assert (
        client.call(
            "POST", f"/namespaces/{ns}/tables/t/metrics", json={"report-type": "scan-report"}
        ).status_code
        == 204
    )


def test_stage_create_then_commit_creates_the_table(
    client: Client, catalog_server: CatalogServer
) -> None:
    catalog = catalog_server.pyiceberg_catalog()
    ns = new_namespace(catalog)
    transaction = catalog.create_table_transaction((ns, "staged"), pa.schema([("id", pa.int64())]))
    assert client.call("HEAD", f"/namespaces/{ns}/tables/staged").status_code == 404
    transaction.append(pa.table({"id": [1, 2]}))
    transaction.commit_transaction()
    assert catalog.load_table((ns, "staged")).scan().to_arrow().num_rows == 2


def test_multi_table_transaction_is_all_or_nothing(
    client: Client, catalog_server: CatalogServer
) -> None:
    catalog = catalog_server.pyiceberg_catalog()
    ns = new_namespace(catalog)
    a = catalog.create_table((ns, "a"), pa.schema([("id", pa.int64())]))
    b = catalog.create_table((ns, "b"), pa.schema([("id", pa.int64())]))

    def change(table: str, uuid: str, value: str) -> dict[str, Any]:
        return {
            "identifier": {"namespace": [ns], "name": table},
            "requirements": [{"type": "assert-table-uuid", "uuid": uuid}],
            "updates": [{"action": "set-properties", "updates": {"run": value}}],
        }

    bad = [
        change("a", str(a.metadata.table_uuid), "1"),
        change("b", "00000000-0000-0000-0000-000000000000", "1"),
    ]
    assert_error(
        client.call("POST", "/transactions/commit", json={"table-changes": bad}),
        409,
        "CommitFailedException",
    )
    assert "run" not in catalog.load_table((ns, "a")).properties

    good = [
        change("a", str(a.metadata.table_uuid), "2"),
        change("b", str(b.metadata.table_uuid), "2"),
    ]
    assert (
        client.call("POST", "/transactions/commit", json={"table-changes": good}).status_code == 204
    )
    assert catalog.load_table((ns, "a")).properties["run"] == "2"
    assert catalog.load_table((ns, "b")).properties["run"] == "2"


def test_rename_register_and_purge(client: Client, catalog_server: CatalogServer) -> None:
    catalog = catalog_server.pyiceberg_catalog()
    ns = new_namespace(catalog)
    table = catalog.create_table((ns, "t"), pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1]}))
    catalog.create_table((ns, "other"), pa.schema([("id", pa.int64())]))

    def rename(src: str, dst: str) -> requests.Response:
        return client.call("POST", "/tables/rename", json={
            "source": {"namespace": [ns], "name": src}, "destination": {"namespace": [ns], "name": dst}})  # fmt: skip

    assert_error(rename("t", "other"), 409, "AlreadyExistsException")
    assert_error(rename("missing", "x"), 404, "NoSuchTableException")
    assert rename("t", "t2").status_code == 204
    t2 = catalog.load_table((ns, "t2"))
    location = t2.metadata_location
    first_location = t2.metadata.metadata_log[0].metadata_file  # before the append

    def register(name: str, metadata_location: str, overwrite: bool = False) -> requests.Response:
        body = {"name": name, "metadata-location": metadata_location, "overwrite": overwrite}
        return client.call("POST", f"/namespaces/{ns}/register", json=body)

    # Two tables never share a location (issue 41): not while t2 holds it.
    assert_error(register("copy", location), 400, "BadRequestException")
    assert client.call("DELETE", f"/namespaces/{ns}/tables/t2").status_code == 204
    assert Path(location.removeprefix("file://")).exists()  # plain drop keeps files
    registered = register("copy", location)
    assert registered.status_code == 200 and registered.json()["metadata-location"] == location
    assert catalog.load_table((ns, "copy")).scan().to_arrow().num_rows == 1
    other_location = catalog.load_table((ns, "other")).metadata_location
    assert_error(register("copy", other_location), 409, "AlreadyExistsException")
    # over its own earlier metadata: same location, allowed; over other's: shared, refused
    assert_error(register("copy", other_location, overwrite=True), 400, "BadRequestException")
    overwritten = register("copy", first_location, overwrite=True)
    assert overwritten.json()["metadata-location"] == first_location
    assert register("copy", location, overwrite=True).status_code == 200

    assert (
        client.call(
            "DELETE", f"/namespaces/{ns}/tables/copy", params={"purgeRequested": "true"}
        ).status_code
        == 204
    )
    assert not Path(location.removeprefix("file://")).exists()
    assert_error(
        client.call("DELETE", f"/namespaces/{ns}/tables/copy"), 404, "NoSuchTableException"
    )


def test_server_log_never_contains_the_secret(
    client: Client, catalog_server: CatalogServer
) -> None:
    client.call("GET", "/namespaces")
    log_text = catalog_server.process.log_file.read_text()
    assert catalog_server.client_secret not in log_text
    assert client.headers["Authorization"].split()[1] not in log_text
    assert os.environ.get("TABLEFLOW_CATALOG_CLIENT_SECRET") != catalog_server.client_secret
