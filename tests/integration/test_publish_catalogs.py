"""Publishing to real catalogs: a second tableflow REST catalog server (its own process),
a SQL catalog on SQLite, and AWS Glue served by moto in server mode over HTTP.

The source table lives in the session's catalog server; each published table is read
back through the catalog it was published to (pyiceberg, and DuckDB on the published
pointer) and must hold the source's rows, before and after the source moves on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from pyiceberg.catalog import load_catalog

from tableflow_core.config.loader import load_project
from tableflow_core.config.project import Project
from tableflow_core.dev.processes import free_port
from tableflow_core.publish import (
    publish_table,
    published_state,
    read_published_pointers,
)
from tests.fixtures.catalog import CatalogServer, start_catalog_server, unique_namespace
from tests.unit.test_engine_helpers import duckdb_connection

pytestmark = pytest.mark.slow
HOST = "127.0.0.1"
GLUE_KEY_ID = "AKIDTESTTABLEFLOW"
GLUE_SECRET = "glue-secret-never-printed-7f3a"


@pytest.fixture(scope="module")
def second_catalog(
    tmp_path_factory: pytest.TempPathFactory, catalog_server: CatalogServer
) -> Iterator[CatalogServer]:
    # The published pointer stays in the source catalog's warehouse: the second server
    # confines locations to its own warehouse unless that one is allowed explicitly.
    server = start_catalog_server(
        tmp_path_factory.mktemp("second-catalog"),
        allowed_locations=(catalog_server.warehouse.as_uri(),),
    )
    yield server
    server.process.stop()


@pytest.fixture(scope="module")
def glue_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port(HOST)
    server = ThreadedMotoServer(ip_address=HOST, port=port, verbose=False)
    server.start()
    yield f"http://{HOST}:{port}"
    server.stop()


def rest_catalog_config(server: CatalogServer) -> dict[str, Any]:
    return {
        "type": "rest",
        "uri": server.uri,
        "credential": server.credential,
        "properties": {"oauth2-server-uri": server.uri + "/v1/oauth/tokens", "scope": "catalog"},
    }


def glue_config(endpoint: str) -> dict[str, Any]:
    return {
        "type": "glue",
        "endpoint": endpoint,
        "region": "us-east-1",
        "access_key_id": GLUE_KEY_ID,
        "secret_access_key": GLUE_SECRET,
    }


def write_publish_project(
    root: Path, source: CatalogServer, namespace: str, publish: dict[str, Any]
) -> Project:
    root.mkdir(parents=True, exist_ok=True)
    target = {
        "kafka": {"bootstrap_servers": "127.0.0.1:1"},
        "catalog": {**rest_catalog_config(source), "name": "tf_source"},
        "publish_catalogs": publish,
    }
    project = {
        "name": "shop",
        "default_target": "test",
        "targets": {"test": target},
        "defaults": {"namespace": namespace},
        "tables": [
            {
                "name": "orders",
                "topic": "orders",
                "value": {"format": "json"},
                "publish_to": list(publish),
            }
        ],
    }
    (root / "tableflow_project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
    return load_project(root)


def append(table: Any, start: int, count: int) -> Any:
    table.append(
        pa.table(
            {
                "id": pa.array(range(start, start + count), pa.int64()),
                "name": [f"n{i}" for i in range(start, start + count)],
            }
        )
    )
    return table


def rows_of(table: Any) -> list[tuple[int, str]]:
    arrow = table.scan().to_arrow()
    return sorted(zip(arrow["id"].to_pylist(), arrow["name"].to_pylist(), strict=True))


def duckdb_rows(metadata_location: str) -> list[tuple[int, str]]:
    result = duckdb_connection().execute(
        f"SELECT id, name FROM iceberg_scan('{metadata_location}') ORDER BY id"
    )
    return [(int(i), str(n)) for i, n in result.fetchall()]


@pytest.fixture
def source_table(catalog_server: CatalogServer) -> tuple[str, Any]:
    namespace = unique_namespace("pub")
    catalog = catalog_server.pyiceberg_catalog()
    catalog.create_namespace(namespace)
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    table = catalog.create_table(f"{namespace}.orders", schema=schema)
    append(table, 0, 10)
    append(table, 10, 5)
    return namespace, table


def test_publish_to_rest_sql_and_glue_then_follow_the_source(
    tmp_path: Path,
    catalog_server: CatalogServer,
    second_catalog: CatalogServer,
    glue_endpoint: str,
    source_table: tuple[str, Any],
) -> None:
    namespace, source = source_table
    sql_uri = f"sqlite:///{tmp_path / 'published.db'}"
    publish = {
        "second": rest_catalog_config(second_catalog),
        "sqlite": {"type": "sql", "uri": sql_uri, "warehouse": (tmp_path / "wh").as_uri()},
        "glue": glue_config(glue_endpoint),
    }
    project = write_publish_project(tmp_path / "project", catalog_server, namespace, publish)
    table = project.table("orders")
    readers = {
        "second": lambda: second_catalog.pyiceberg_catalog("second"),
        "sqlite": lambda: load_catalog(
            "sqlite", type="sql", uri=sql_uri, warehouse=(tmp_path / "wh").as_uri()
        ),
        "glue": lambda: load_catalog(
            "glue",
            **{
                "type": "glue",
                "glue.endpoint": glue_endpoint,
                "glue.region": "us-east-1",
                "glue.access-key-id": GLUE_KEY_ID,
                "glue.secret-access-key": GLUE_SECRET,
            },
        ),
    }
    glue_database = namespace  # one-level namespace: the Glue database has its name

    first = source.metadata_location
    states = published_state(table, first, read_published_pointers(project, table))
    assert [(s.catalog, s.status) for s in states] == [
        ("second", "missing"),
        ("sqlite", "missing"),
        ("glue", "missing"),
    ]
    result = publish_table(project, table, first)
    assert result.ok, result.summary_line()
    assert [e.action for e in result.entries] == ["registered"] * 3
    expected = rows_of(source)
    assert len(expected) == 15
    for name, reader in readers.items():
        ident = f"{glue_database}.orders" if name == "glue" else f"{namespace}.orders"
        published = reader().load_table(ident)
        assert published.metadata_location == first, name
        assert rows_of(published) == expected, name
        assert duckdb_rows(published.metadata_location) == expected, name

    # The source moves on: every pointer is stale until published again.
    append(source, 15, 7)
    second = source.metadata_location
    states = published_state(table, second, read_published_pointers(project, table))
    assert {s.status for s in states} == {"stale"}
    assert "points at" in states[0].describe()
    result = publish_table(project, table, second)
    assert [e.action for e in result.entries] == ["updated"] * 3, result.summary_line()
    assert all(e.previous == first for e in result.entries)
    expected = rows_of(source)
    assert len(expected) == 22
    for name, reader in readers.items():
        published = reader().load_table(f"{namespace}.orders")
        assert published.metadata_location == second, name
        assert rows_of(published) == expected, name
    # Publishing again is a no-op; the state is current everywhere.
    assert [e.action for e in publish_table(project, table, second).entries] == ["unchanged"] * 3
    states = published_state(table, second, read_published_pointers(project, table))
    assert not any(s.needs_publish for s in states)

    # Glue keeps the previous pointer, as Iceberg's Glue catalog does.
    import boto3

    glue = boto3.client(
        "glue",
        endpoint_url=glue_endpoint,
        region_name="us-east-1",
        aws_access_key_id=GLUE_KEY_ID,
        aws_secret_access_key=GLUE_SECRET,
    )
    params = glue.get_table(DatabaseName=glue_database, Name="orders")["Table"]["Parameters"]
    assert params["metadata_location"] == second
    assert params["previous_metadata_location"] == first
    assert params["table_type"] == "ICEBERG"


def test_a_failing_catalog_is_reported_without_its_secret(
    tmp_path: Path,
    catalog_server: CatalogServer,
    second_catalog: CatalogServer,
    source_table: tuple[str, Any],
) -> None:
    namespace, source = source_table
    bad_secret = "wrong-secret-must-not-leak-19c2"
    wrong = {**rest_catalog_config(second_catalog), "credential": f"nobody:{bad_secret}"}
    sql_uri = f"sqlite:///{tmp_path / 'ok.db'}"
    publish = {
        "locked": wrong,
        "sqlite": {"type": "sql", "uri": sql_uri, "warehouse": (tmp_path / "wh").as_uri()},
    }
    project = write_publish_project(tmp_path / "project", catalog_server, namespace, publish)
    result = publish_table(project, project.table("orders"), source.metadata_location)
    by_catalog = {e.catalog: e for e in result.entries}
    assert by_catalog["locked"].action == "error" and not result.ok
    assert bad_secret not in (by_catalog["locked"].error or "")
    assert by_catalog["sqlite"].action == "registered"  # one failure does not stop the others
