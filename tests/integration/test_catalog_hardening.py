"""Regression tests of issue #12 for the catalog server: auth default, confined paths,
validated metadata updates and names. A real server (in this process), plain HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.rest import RestCatalog

from tableflow_core.catalog import CatalogServerSettings, serve_in_background
from tableflow_core.catalog.project_settings import (
    in_process_server_settings,
)
from tableflow_core.catalog.runner import RunningCatalogServer
from tableflow_core.catalog.settings import CLIENT_SECRET_ENV
from tableflow_core.config.loader import load_project
from tableflow_core.config.models.catalogs import EmbeddedCatalog
from tableflow_core.config.project import Project

NOT_ALLOWED = "locations must be inside the catalog's warehouse"


class Api:
    def __init__(self, server: RunningCatalogServer) -> None:
        self.base = server.uri + "/v1"

    def call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, self.base + path, timeout=10, **kwargs)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCatalogServer]:
    base = tmp_path_factory.mktemp("hardening")
    settings = CatalogServerSettings(warehouse=base / "wh", auth="none", access_log=False)
    with serve_in_background(settings) as running:
        yield running


@pytest.fixture(scope="module")
def api(server: RunningCatalogServer) -> Api:
    return Api(server)


@pytest.fixture(scope="module")
def catalog(server: RunningCatalogServer) -> RestCatalog:
    loaded = load_catalog("hardening", **server.pyiceberg_properties())
    assert isinstance(loaded, RestCatalog)
    loaded.create_namespace("h")
    return loaded


def assert_400(response: requests.Response, *needles: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "BadRequestException" and error["code"] == 400
    for needle in needles:
        assert needle in error["message"], error["message"]


# ---------------------------------------------------------------- auth default


def _embedded_without_secret(root: Path, monkeypatch: pytest.MonkeyPatch, options: str) -> Project:
    """A project whose embedded catalog (`options` added) has no auth block, and no secret
    in the environment either."""
    monkeypatch.delenv(CLIENT_SECRET_ENV, raising=False)
    (root / "tableflow_project.yml").write_text(
        "name: p\ntargets:\n  dev:\n    kafka: {bootstrap_servers: 'b:1'}\n"
        f"    catalog: {{type: embedded, port: 0{options}}}\n"
    )
    return load_project(root)


def test_in_process_server_without_secret_still_requires_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _embedded_without_secret(tmp_path, monkeypatch, "")
    assert isinstance(project.target.catalog, EmbeddedCatalog)
    settings = in_process_server_settings(project, project.target.catalog, access_log=False)
    with serve_in_background(settings) as running:
        assert running.credential is not None
        assert requests.get(running.uri + "/v1/namespaces", timeout=10).status_code == 401
        catalog = load_catalog("p", **running.pyiceberg_properties())
        assert catalog.list_namespaces() == []


# ---------------------------------------------------------------- locations


def test_create_table_location_outside_the_warehouse_is_refused(
    api: Api, catalog: RestCatalog, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    body = {"name": "t_loc", "schema": _schema_json(), "location": outside.as_uri()}
    assert_400(api.call("POST", "/namespaces/h/tables", json=body), NOT_ALLOWED)
    body = {"name": "t_prop", "schema": _schema_json(), "properties": {"write.metadata.path": str(outside)}}  # fmt: skip
    assert_400(api.call("POST", "/namespaces/h/tables", json=body), NOT_ALLOWED)
    assert not outside.exists()


def test_namespace_location_outside_the_warehouse_is_refused(api: Api, tmp_path: Path) -> None:
    body = {"namespace": ["ns_loc"], "properties": {"location": str(tmp_path)}}
    assert_400(api.call("POST", "/namespaces", json=body), NOT_ALLOWED)
    assert api.call("POST", "/namespaces", json={"namespace": ["ns_loc"]}).status_code == 200
    update = {"updates": {"location": "/etc"}}
    assert_400(api.call("POST", "/namespaces/ns_loc/properties", json=update), NOT_ALLOWED)


@pytest.mark.parametrize(
    "update",
    [
        {"action": "set-location", "location": "/tmp/elsewhere"},
        {"action": "set-properties", "updates": {"write.metadata.path": "/tmp/elsewhere"}},
        {"action": "set-properties", "updates": {"write.data.path": "file:///tmp/x"}},
    ],
)
def test_commit_moving_files_out_of_the_warehouse_is_refused(
    api: Api, catalog: RestCatalog, update: dict[str, Any]
) -> None:
    table = _table(catalog, "t_move")
    before = table.metadata_location
    response = _commit(api, "t_move", [update])
    assert_400(response, NOT_ALLOWED)
    assert catalog.load_table(("h", "t_move")).metadata_location == before


def test_register_outside_the_warehouse_reveals_nothing(
    api: Api, server: RunningCatalogServer, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    existing = tmp_path / "secret.metadata.json"
    existing.write_text("root:x:0:0:TOP-SECRET-BYTES")
    answers = [
        api.call("POST", "/namespaces/h/register", json={"name": "r", "metadata-location": path})
        for path in [str(existing), str(tmp_path / "missing.json"), "/etc/passwd"]
    ]
    assert {r.status_code for r in answers} == {400}
    assert len({r.text for r in answers}) == 1  # same answer whether or not the file exists
    assert "TOP-SECRET" not in capfd.readouterr().err


def test_register_inside_the_warehouse_same_answer_for_missing_and_garbage(
    api: Api, server: RunningCatalogServer, catalog: RestCatalog
) -> None:
    warehouse = Path(server.settings.warehouse).resolve()
    garbage = warehouse / "garbage.metadata.json"
    garbage.write_text("not json")
    answers = [
        api.call("POST", "/namespaces/h/register", json={"name": "r2", "metadata-location": path})
        for path in [str(garbage), str(warehouse / "missing.metadata.json")]
    ]
    assert {r.status_code for r in answers} == {400}
    assert len({r.text for r in answers}) == 1
    # a real metadata file in the warehouse still registers (once its table is dropped:
    # two tables never share a location)
    source = _table(catalog, "t_src")
    catalog.drop_table(("h", "t_src"))
    response = api.call(
        "POST",
        "/namespaces/h/register",
        json={"name": "t_registered", "metadata-location": source.metadata_location},
    )
    assert response.status_code == 200, response.text


# ---------------------------------------------------------------- metadata updates


def test_add_schema_with_duplicate_field_ids_is_refused(api: Api, catalog: RestCatalog) -> None:
    _table(catalog, "t_schema")
    schema = {
        "type": "struct",
        "schema-id": 1,
        "fields": [
            {"id": 1, "name": "id", "type": "long", "required": False},
            {"id": 1, "name": "other", "type": "string", "required": False},
        ],
    }
    response = _commit(api, "t_schema", [{"action": "add-schema", "schema": schema}])
    assert_400(response, "duplicate field id 1")


@pytest.mark.parametrize(
    ("update", "needle"),
    [
        (
            {"action": "add-spec", "spec": {"spec-id": 1, "fields": [
                {"source-id": 99, "field-id": 1000, "name": "x", "transform": "identity"}]}},
            "column id 99",
        ),
        (
            {"action": "add-sort-order", "sort-order": {"order-id": 1, "fields": [
                {"source-id": 99, "transform": "identity", "direction": "asc",
                 "null-order": "nulls-first"}]}},
            "column id 99",
        ),
        (
            {"action": "add-spec", "spec": {"spec-id": 1, "fields": [
                {"source-id": 1, "field-id": 1000, "name": "d", "transform": "day"}]}},
            "cannot apply",
        ),
        ({"action": "set-statistics", "statistics": {
            "snapshot-id": 12345, "statistics-path": "/x.puffin",
            "file-size-in-bytes": 1, "file-footer-size-in-bytes": 1, "blob-metadata": []}},
         "snapshot 12345 does not exist"),
        ({"action": "set-statistics"}, "statistics"),
        ({"action": "add-spec", "spec": {"spec-id": 1, "fields": [
            {"source-id": 1, "field-id": 1000, "name": "t", "transform": "truncate[-1]"}]}},
         "truncate"),
        ({"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": [
            {"id": 2, "name": "d", "type": "decimal(99,99)", "required": False}]}}, ""),
    ],
)  # fmt: skip
def test_invalid_updates_are_refused(
    api: Api, catalog: RestCatalog, update: dict[str, Any], needle: str
) -> None:
    table = _table(catalog, "t_updates")
    response = _commit(api, "t_updates", [update])
    assert_400(response, needle)
    assert catalog.load_table(("h", "t_updates")).metadata_location == table.metadata_location


def test_add_snapshot_checks_parent_and_manifest_list(
    api: Api, catalog: RestCatalog, server: RunningCatalogServer, tmp_path: Path
) -> None:
    table = _table(catalog, "t_snap")
    table.append(pa.table({"id": [1]}))
    table = catalog.load_table(("h", "t_snap"))
    current = table.current_snapshot()
    assert current is not None and current.manifest_list is not None

    def snapshot(snapshot_id: int, parent: int | None, manifest_list: str) -> dict[str, Any]:
        return {
            "action": "add-snapshot",
            "snapshot": {
                "snapshot-id": snapshot_id,
                "parent-snapshot-id": parent,
                "sequence-number": 2,
                "timestamp-ms": 1,
                "manifest-list": manifest_list,
                "summary": {"operation": "append"},
                "schema-id": 0,
            },
        }

    outside = str(tmp_path / "snap.avro")
    assert_400(_commit(api, "t_snap", [snapshot(7, current.snapshot_id, outside)]), NOT_ALLOWED)
    other_table = str(Path(server.settings.warehouse).resolve() / "elsewhere" / "snap.avro")
    assert_400(
        _commit(api, "t_snap", [snapshot(7, current.snapshot_id, other_table)]),
        "must be under its location",
    )
    assert_400(
        _commit(api, "t_snap", [snapshot(7, 424242, current.manifest_list)]),
        "parent snapshot 424242 does not exist",
    )
    ok = _commit(api, "t_snap", [snapshot(7, current.snapshot_id, current.manifest_list)])
    assert ok.status_code == 200, ok.text


def test_remove_missing_property_is_not_an_error(api: Api, catalog: RestCatalog) -> None:
    _table(catalog, "t_props")
    response = _commit(
        api,
        "t_props",
        [
            {"action": "set-properties", "updates": {"a": "1"}},
            {"action": "remove-properties", "removals": ["a", "never-set"]},
        ],
    )
    assert response.status_code == 200, response.text
    assert "a" not in response.json()["metadata"]["properties"]


@pytest.mark.parametrize(
    "body", [{}, {"updates": []}, {"requirements": []}, {"requirements": [], "updates": [{}]}]
)
def test_commit_missing_required_fields_is_400(
    api: Api, catalog: RestCatalog, body: dict[str, Any]
) -> None:
    _table(catalog, "t_body")
    assert_400(api.call("POST", "/namespaces/h/tables/t_body", json=body))


# ---------------------------------------------------------------- names


@pytest.mark.parametrize(
    "name", ["a/b", "a\\b", "nul\x00", "tab\tname", "bell\x07", "x" * 256, "a.b", ""]
)
def test_bad_names_are_400(api: Api, catalog: RestCatalog, name: str) -> None:
    assert_400(api.call("POST", "/namespaces", json={"namespace": [name]}))
    body = {"name": name, "schema": _schema_json()}
    assert_400(api.call("POST", "/namespaces/h/tables", json=body))
    if name and "/" not in name:
        encoded = requests.utils.quote(name, safe="")
        assert_400(api.call("GET", f"/namespaces/{encoded}/tables"))
        assert_400(api.call("GET", f"/namespaces/h/tables/{encoded}"))


def test_sql_like_patterns_in_names_do_not_fail(api: Api, catalog: RestCatalog) -> None:
    for name in ["%" * 255, "_%_!", "x" * 255]:
        assert api.call("POST", "/namespaces", json={"namespace": [name]}).status_code == 200
        encoded = requests.utils.quote(name, safe="")
        assert api.call("GET", f"/namespaces?parent={encoded}").status_code == 200
        assert api.call("GET", f"/namespaces/{encoded}/tables").status_code == 200


def test_too_many_namespace_levels_is_400(api: Api) -> None:
    assert_400(api.call("POST", "/namespaces", json={"namespace": ["a"] * 17}))


# ---------------------------------------------------------------- helpers


def _schema_json() -> dict[str, Any]:
    return {
        "type": "struct",
        "schema-id": 0,
        "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
    }


def _table(catalog: RestCatalog, name: str) -> Any:
    if catalog.table_exists(("h", name)):
        return catalog.load_table(("h", name))
    return catalog.create_table(("h", name), pa.schema([("id", pa.int64())]))


def _commit(api: Api, table: str, updates: list[dict[str, Any]]) -> requests.Response:
    body = {"requirements": [], "updates": updates}
    return api.call("POST", f"/namespaces/h/tables/{table}", json=body)


def test_plan_apply_catalog_without_auth_config_uses_a_private_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tableflow_core.targets.catalog import open_catalog

    project = _embedded_without_secret(tmp_path, monkeypatch, ", warehouse: ./wh")
    with open_catalog(project) as handle:
        assert handle.started_server
        credential = handle.spark_properties["credential"]
        assert credential.startswith("tableflow:") and len(credential) > 30
        handle.catalog.create_namespace("n")
        assert handle.catalog.list_namespaces() == [("n",)]
        uri = handle.spark_properties["uri"]
        assert requests.get(uri + "/v1/namespaces", timeout=10).status_code == 401


def test_oversized_request_body_is_refused(api: Api) -> None:
    from tableflow_core.catalog.app import MAX_BODY_BYTES

    big = b'{"namespace": ["big"], "properties": {"a": "' + b"x" * MAX_BODY_BYTES + b'"}}'
    response = api.call(
        "POST", "/namespaces", data=big, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while streaming
        yield b'{"namespace": ["big"], "properties": {"a": "'
        for _ in range(MAX_BODY_BYTES // (1024 * 1024) + 1):
            yield b"x" * (1024 * 1024)
        yield b'"}}'

    streamed = api.call(
        "POST", "/namespaces", data=chunks(), headers={"Content-Type": "application/json"}
    )
    assert streamed.status_code == 413, streamed.text
    assert api.call("GET", "/namespaces/big").status_code == 404
