"""Issue #32: the catalog never writes or deletes a file outside its warehouse, whatever
symbolic links sit inside it and whatever paths a table's manifests name.

A real server on a thread of this process (no child process), plain HTTP and pyiceberg.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.rest import RestCatalog

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


# ---------------------------------------------------------------- purge


def purge(server: RunningCatalogServer, table: str) -> None:
    response = call(server, "DELETE", f"/namespaces/p/tables/{table}?purgeRequested=true")
    assert response.status_code == 204, response.text


def parquet(path: Path, ids: list[int]) -> str:
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), path)
    return str(path)


@pytest.fixture
def catalog(server: RunningCatalogServer) -> RestCatalog:
    loaded = load_catalog("purge", **server.pyiceberg_properties())
    assert isinstance(loaded, RestCatalog)
    loaded.create_namespace("p")
    return loaded


def files_under(path: Path) -> set[Path]:
    return {p for p in path.rglob("*") if p.is_file()}


def test_purge_never_deletes_a_file_outside_the_warehouse(
    server: RunningCatalogServer, catalog: RestCatalog, warehouse: Path, outside: Path
) -> None:
    table = catalog.create_table(("p", "t"), pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    foreign = parquet(outside / "foreign.parquet", [3])
    table.add_files([foreign])
    assert table.refresh().scan().to_arrow().num_rows == 3
    own_files = files_under(warehouse / "p" / "t")
    assert any(p.suffix == ".parquet" for p in own_files)
    purge(server, "t")
    assert Path(foreign).read_bytes()  # still there, untouched
    assert (outside / "precious.txt").read_text() == "keep me"
    assert not files_under(warehouse / "p" / "t")  # the table's own files are gone


def test_purge_keeps_another_tables_files_and_honours_gc_enabled(
    server: RunningCatalogServer, catalog: RestCatalog, warehouse: Path
) -> None:
    other = catalog.create_table(("p", "other"), pa.schema([("id", pa.int64())]))
    other.append(pa.table({"id": pa.array([7], pa.int64())}))
    others_file = next(p for p in files_under(warehouse / "p" / "other") if p.suffix == ".parquet")
    borrower = catalog.create_table(("p", "borrower"), pa.schema([("id", pa.int64())]))
    borrower.add_files([str(others_file)])
    purge(server, "borrower")
    assert others_file.exists()
    assert catalog.load_table(("p", "other")).scan().to_arrow().num_rows == 1

    kept = catalog.create_table(
        ("p", "kept"), pa.schema([("id", pa.int64())]), properties={"gc.enabled": "false"}
    )
    kept.append(pa.table({"id": pa.array([1], pa.int64())}))
    data_files = {p for p in files_under(warehouse / "p" / "kept") if p.suffix == ".parquet"}
    assert data_files
    purge(server, "kept")
    assert all(p.exists() for p in data_files)  # data kept, as Iceberg does with gc disabled
    assert not list((warehouse / "p" / "kept" / "metadata").glob("*.metadata.json"))


def test_register_refuses_metadata_naming_files_outside_the_warehouse(
    server: RunningCatalogServer, catalog: RestCatalog, warehouse: Path, outside: Path
) -> None:
    table = catalog.create_table(("p", "src"), pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1], pa.int64())}))
    metadata = json.loads(
        Path(table.refresh().metadata_location.removeprefix("file://")).read_text()
    )
    metadata["snapshots"][0]["manifest-list"] = str(outside / "precious.txt")
    forged = warehouse / "p" / "forged.metadata.json"
    forged.write_text(json.dumps(metadata))
    body = {"name": "forged", "metadata-location": str(forged)}
    assert_refused(call(server, "POST", "/namespaces/p/register", json=body))
    metadata["snapshots"][0]["manifest-list"] = table.metadata.snapshots[0].manifest_list
    metadata["metadata-log"] = [{"metadata-file": str(outside / "precious.txt"), "timestamp-ms": 1}]
    forged.write_text(json.dumps(metadata))
    assert_refused(call(server, "POST", "/namespaces/p/register", json=body))
    assert untouched(outside)
