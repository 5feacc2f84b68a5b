"""Issue #32: the catalog never writes or deletes a file outside its warehouse, whatever
symbolic links sit inside it and whatever paths a table's manifests name.

A real server on a thread of this process (no child process), plain HTTP and pyiceberg.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tableflow_core.catalog import CatalogServerSettings, serve_in_background
from tableflow_core.catalog.locations import LocationPolicy
from tableflow_core.catalog.runner import RunningCatalogServer

NOT_ALLOWED = "locations must be inside the catalog's warehouse"
SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "a", "required": False, "type": "int"}]}


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "wh"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "precious.txt").write_text("keep me")
    return path


@pytest.fixture
def server(warehouse: Path) -> Iterator[RunningCatalogServer]:
    settings = CatalogServerSettings(warehouse=warehouse, auth="none", access_log=False)
    with serve_in_background(settings) as running:
        yield running


def call(server: RunningCatalogServer, method: str, path: str, **kwargs: Any) -> requests.Response:
    return requests.request(method, server.uri + "/v1" + path, timeout=30, **kwargs)


def assert_refused(response: requests.Response) -> None:
    assert response.status_code == 400, response.text
    assert NOT_ALLOWED in response.json()["error"]["message"]


def untouched(outside: Path) -> bool:
    return sorted(p.name for p in outside.rglob("*")) == ["precious.txt"]


# ---------------------------------------------------------------- symbolic links


def test_policy_resolves_links(tmp_path: Path, outside: Path) -> None:
    warehouse = tmp_path / "wh"
    (warehouse / "inner").mkdir(parents=True)
    (warehouse / "out").symlink_to(outside)
    (warehouse / "in").symlink_to(warehouse / "inner")
    policy = LocationPolicy.for_warehouse(warehouse.as_uri())
    assert not policy.allows(str(warehouse / "out" / "t"))
    assert not policy.allows((warehouse / "out" / "t" / "metadata").as_uri())
    assert policy.allows(str(warehouse / "in" / "t"))
    assert policy.allows(str(warehouse / "new" / "t"))
    # a warehouse reached through a link is the same warehouse
    (tmp_path / "wh-link").symlink_to(warehouse)
    linked = LocationPolicy.for_warehouse((tmp_path / "wh-link").as_uri())
    assert linked.allows(str(warehouse / "inner" / "t"))
    assert not linked.allows(str(tmp_path / "wh-link" / "out" / "t"))


def test_a_link_inside_the_warehouse_does_not_let_a_table_write_outside(
    server: RunningCatalogServer, warehouse: Path, outside: Path
) -> None:
    assert call(server, "POST", "/namespaces", json={"namespace": ["n"]}).ok
    (warehouse / "escape").symlink_to(outside)
    location = str(warehouse / "escape" / "t")
    create = {"name": "t", "schema": SCHEMA, "location": location}
    assert_refused(call(server, "POST", "/namespaces/n/tables", json=create))
    namespace = {"namespace": ["m"], "properties": {"location": location}}
    assert_refused(call(server, "POST", "/namespaces", json=namespace))
    # a namespace whose default directory is a link
    assert call(server, "POST", "/namespaces", json={"namespace": ["ln"]}).ok
    (warehouse / "ln").symlink_to(outside)
    created = call(server, "POST", "/namespaces/ln/tables", json={"name": "t", "schema": SCHEMA})
    assert_refused(created)
    # set-location and write.metadata.path through the link
    assert call(server, "POST", "/namespaces/n/tables", json={"name": "ok", "schema": SCHEMA}).ok
    for update in (
        {"action": "set-location", "location": location},
        {"action": "set-properties", "updates": {"write.metadata.path": location}},
    ):
        body = {"requirements": [], "updates": [update]}
        assert_refused(call(server, "POST", "/namespaces/n/tables/ok", json=body))
    assert untouched(outside)


def test_a_metadata_directory_replaced_by_a_link_is_not_written_through(
    server: RunningCatalogServer, warehouse: Path, outside: Path
) -> None:
    assert call(server, "POST", "/namespaces", json={"namespace": ["n"]}).ok
    assert call(server, "POST", "/namespaces/n/tables", json={"name": "t", "schema": SCHEMA}).ok
    metadata_dir = warehouse / "n" / "t" / "metadata"
    moved = shutil.move(metadata_dir, outside / "metadata")  # the current file stays readable
    metadata_dir.symlink_to(moved)
    before = sorted(outside.rglob("*"))
    body = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
    assert_refused(call(server, "POST", "/namespaces/n/tables/t", json=body))
    assert sorted(outside.rglob("*")) == before


def test_links_that_stay_inside_the_warehouse_are_fine(
    server: RunningCatalogServer, warehouse: Path
) -> None:
    (warehouse / "real").mkdir(parents=True)
    (warehouse / "alias").symlink_to(warehouse / "real")
    assert call(server, "POST", "/namespaces", json={"namespace": ["n"]}).ok
    create = {"name": "t", "schema": SCHEMA, "location": str(warehouse / "alias" / "t")}
    assert call(server, "POST", "/namespaces/n/tables", json=create).status_code == 200
    assert list((warehouse / "real" / "t" / "metadata").glob("*.metadata.json"))
