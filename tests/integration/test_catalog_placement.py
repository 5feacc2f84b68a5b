"""Issue 41, item 1: a table's location never equals, contains or sits inside another
table's, nor is the warehouse root or a namespace folder; a purge never deletes another
table's files, even for a table placed over it before the catalog refused that.

Real servers on a thread of this process (the service is reached directly only to forge
a table placed over another, as an older catalog allowed), once on a file:// warehouse
and once on the S3 test server (s3proxy), through plain HTTP and pyiceberg.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io import load_file_io

from tableflow_core.catalog import CatalogServerSettings, serve_in_background
from tableflow_core.catalog.runner import RunningCatalogServer
from tableflow_core.catalog.storage import ObjectStorage
from tableflow_core.dev.s3_server import RunningS3Server
from tests.fixtures.s3 import unique_prefix

SCHEMA = pa.schema([("id", pa.int64())])
OVERLAP = "cannot equal, contain or sit inside another table's"


@dataclass
class Lakehouse:
    server: RunningCatalogServer
    catalog: RestCatalog
    warehouse: str  # file:///... or s3://bucket/prefix, no trailing '/'
    io_properties: dict[str, str]

    def call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, self.server.uri + "/v1" + path, timeout=30, **kwargs)

    def create(self, name: str, **body: Any) -> requests.Response:
        schema = {
            "type": "struct",
            "fields": [{"id": 1, "name": "id", "required": False, "type": "long"}],
        }
        return self.call(
            "POST", "/namespaces/p/tables", json={"name": name, "schema": schema, **body}
        )

    def exists(self, path: str) -> bool:
        return load_file_io(self.io_properties, path).new_input(path).exists()


def _lakehouse(
    settings: CatalogServerSettings, io_properties: dict[str, str]
) -> Iterator[Lakehouse]:
    with serve_in_background(settings) as running:
        catalog = load_catalog("placement", **running.pyiceberg_properties(), **io_properties)
        assert isinstance(catalog, RestCatalog)
        catalog.create_namespace("p")
        yield Lakehouse(running, catalog, settings.warehouse_uri.rstrip("/"), io_properties)


@pytest.fixture(params=["file", "s3"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Lakehouse]:
    if request.param == "file":
        settings = CatalogServerSettings(warehouse=tmp_path / "wh", auth="none", access_log=False)
        yield from _lakehouse(settings, {})
        return
    s3: RunningS3Server = request.getfixturevalue("s3_server")
    storage = ObjectStorage(
        endpoint=s3.endpoint,
        region=s3.region,
        access_key_id=s3.credentials.access_key_id,
        secret_access_key=s3.credentials.secret_access_key,
    )
    settings = CatalogServerSettings(
        warehouse=f"s3://{s3.bucket}/{unique_prefix('placement')}",
        storage=storage,
        database_url=f"sqlite:///{tmp_path / 'catalog.db'}",
        auth="none",
        access_log=False,
    )
    yield from _lakehouse(settings, storage.server_file_io_properties())


def assert_refused(response: requests.Response, words: str = "is not allowed") -> None:
    assert response.status_code == 400, response.text
    assert words in response.json()["error"]["message"], response.text


def test_a_table_cannot_be_placed_over_another_or_over_a_root(lake: Lakehouse) -> None:
    b = lake.catalog.create_table(("p", "b"), SCHEMA)
    b_location = b.metadata.location
    refused = {
        "warehouse root": lake.warehouse,
        "namespace folder": f"{lake.warehouse}/p",
        "b's location": b_location,
        "b's location with a slash": b_location + "/",
        "inside b": f"{b_location}/data",
    }
    for what, location in refused.items():
        response = lake.create(f"x_{what.split()[0].replace(chr(39), '')}", location=location)
        assert response.status_code == 400, (what, response.text)
    assert_refused(lake.create("x_prop", properties={"write.data.path": f"{b_location}/data"}))
    assert_refused(lake.create("x_meta", properties={"write.metadata.path": b_location}))
    # staged creation (stage-create, then a commit with assert-create) is checked too
    assert_refused(lake.create("x_staged", location=b_location, **{"stage-create": True}))

    # a table whose location contains b's: b sits inside it
    inner = lake.catalog.create_table(("p", "inner"), SCHEMA, location=f"{lake.warehouse}/q/r/s")
    assert_refused(lake.create("outer", location=f"{lake.warehouse}/q/r"), OVERLAP)
    assert inner.metadata.location.endswith("/q/r/s")

    # moves of an existing table: set-location and write.*.path properties
    t = lake.catalog.create_table(("p", "t"), SCHEMA)
    for update in (
        {"action": "set-location", "location": b_location},
        {"action": "set-location", "location": f"{lake.warehouse}/p"},
        {"action": "set-properties", "updates": {"write.data.path": f"{b_location}/data"}},
        {"action": "set-properties", "updates": {"write.object-storage.path": lake.warehouse}},
    ):
        body = {"requirements": [], "updates": [update]}
        assert_refused(lake.call("POST", "/namespaces/p/tables/t", json=body))
    # moving inside its own location is fine
    own = {"action": "set-properties", "updates": {"write.data.path": f"{t.metadata.location}/d"}}
    body = {"requirements": [], "updates": [own]}
    assert lake.call("POST", "/namespaces/p/tables/t", json=body).status_code == 200

    # register: a metadata file naming b's location, while b exists
    body = {"name": "b_twin", "metadata-location": b.metadata_location}
    assert_refused(lake.call("POST", "/namespaces/p/register", json=body), OVERLAP)
    # tables side by side, and a namespace's tables under a custom folder, are fine
    lake.catalog.create_table(("p", "b2"), SCHEMA, location=b_location + "2")
    assert lake.create("fine", location=f"{lake.warehouse}/elsewhere/fine").status_code == 200


def test_purge_of_a_table_placed_over_another_keeps_the_others_files(lake: Lakehouse) -> None:
    b = lake.catalog.create_table(("p", "b"), SCHEMA)
    b.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    b_files = [task.file.file_path for task in b.refresh().scan().plan_files()]
    assert b_files and all(lake.exists(path) for path in b_files)

    # A table placed at the namespace folder, as catalogs before issue 41 accepted: its
    # metadata is forged (the catalog refuses to create it now).
    x = lake.catalog.create_table(("p", "x"), SCHEMA)
    assert_refused(lake.create("x_root", location=f"{lake.warehouse}/p"))
    forged = json.loads(
        load_file_io(lake.io_properties, x.metadata_location)
        .new_input(x.metadata_location)
        .open()
        .read()
    )
    forged["location"] = f"{lake.warehouse}/p"
    forged_location = f"{x.metadata.location}/metadata/99999-forged.metadata.json"
    with (
        load_file_io(lake.io_properties, forged_location)
        .new_output(forged_location)
        .create() as out
    ):
        out.write(json.dumps(forged).encode())
    service = lake.server.service
    assert service is not None
    service._set_metadata_location(("p", "x"), forged_location)

    x = lake.catalog.load_table(("p", "x"))
    assert x.metadata.location == f"{lake.warehouse}/p"
    x.add_files(b_files)  # b's data files, named by x's manifests
    own = x.refresh().metadata.snapshots[-1].manifest_list
    assert own.startswith(f"{lake.warehouse}/p/")

    response = lake.call("DELETE", "/namespaces/p/tables/x", params={"purgeRequested": "true"})
    assert response.status_code == 204, response.text
    assert all(lake.exists(path) for path in b_files), "purge deleted b's data files"
    assert lake.catalog.load_table(("p", "b")).scan().to_arrow().num_rows == 2
    assert not lake.exists(own)  # x's own manifest list went
    assert not lake.exists(forged_location)
