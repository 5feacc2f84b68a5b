"""DuckDB 1.5.5's iceberg extension attaches the server with OAuth2 client credentials."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from tableflow_core.readers.duckdb_reader import duckdb_connection
from tests.fixtures.catalog import CatalogServer, unique_namespace


def duckdb_attached(server: CatalogServer, alias: str = "lake") -> duckdb.DuckDBPyConnection:
    con = duckdb_connection()
    con.execute(
        f"CREATE SECRET catalog_secret (TYPE iceberg, CLIENT_ID '{server.client_id}', "
        f"CLIENT_SECRET '{server.client_secret}', OAUTH2_SERVER_URI '{server.uri}/v1/oauth/tokens')"
    )
    con.execute(
        f"ATTACH 'warehouse' AS {alias} (TYPE iceberg, ENDPOINT '{server.uri}', SECRET catalog_secret)"
    )
    return con


def test_duckdb_reads_tables_through_the_catalog(catalog_server: CatalogServer) -> None:
    ns = unique_namespace()
    catalog = catalog_server.pyiceberg_catalog()
    catalog.create_namespace(ns)
    table = catalog.create_table((ns, "t"), pa.schema([("id", pa.int64()), ("name", pa.string())]))
    table.append(pa.table({"id": [1, 2], "name": ["a", "b"]}))
    table.append(pa.table({"id": [3], "name": ["c"]}))

    con = duckdb_attached(catalog_server)
    try:
        assert con.sql(f"SELECT id, name FROM lake.{ns}.t ORDER BY id").fetchall() == [
            (1, "a"),
            (2, "b"),
            (3, "c"),
        ]
        listed = con.sql(
            f"SELECT table_name FROM duckdb_tables() WHERE schema_name = '{ns}'"
        ).fetchall()
        assert listed == [("t",)]
    finally:
        con.close()


def test_duckdb_writes_are_seen_by_pyiceberg(catalog_server: CatalogServer) -> None:
    ns = unique_namespace()
    con = duckdb_attached(catalog_server)
    try:
        con.execute(f"CREATE SCHEMA lake.{ns}")
        con.execute(f"CREATE TABLE lake.{ns}.t (id BIGINT)")
        con.execute(f"INSERT INTO lake.{ns}.t VALUES (1), (2), (3)")
        con.execute(f"DELETE FROM lake.{ns}.t WHERE id = 2")
    finally:
        con.close()
    table = catalog_server.pyiceberg_catalog().load_table((ns, "t"))
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 3]
