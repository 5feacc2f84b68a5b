"""The embedded catalog on an s3:// warehouse: metadata on S3, storage config handed out.

pyiceberg and DuckDB get the S3 endpoint, addressing and region from the catalog
(`/v1/config` defaults, `loadTable` config) and either bring their own keys or take the
ones the catalog vends. Nothing of the table is written to local disk.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import requests

from tableflow_core.catalog.storage import ACCESS_DELEGATION_HEADER, S3_FILE_IO
from tableflow_core.readers.duckdb_reader import duckdb_connection
from tests.fixtures.catalog import client_credentials_grant, new_namespace
from tests.fixtures.s3 import duckdb_s3_secret
from tests.fixtures.s3_catalog import S3CatalogServer

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _token(server: S3CatalogServer) -> str:
    grant = client_credentials_grant(server.uri, server.client_id, server.client_secret, None)
    return str(grant["access_token"])


def _keys(server: S3CatalogServer) -> list[str]:
    client = server.s3.client()
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=server.s3.bucket, Prefix=server.prefix + "/"
    )
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def test_config_names_the_store_and_never_the_keys(s3_catalog: S3CatalogServer) -> None:
    headers = {"Authorization": f"Bearer {_token(s3_catalog)}"}
    config = requests.get(f"{s3_catalog.uri}/v1/config", headers=headers, timeout=10).json()
    assert config["defaults"] == {
        "io-impl": S3_FILE_IO,
        "client.region": s3_catalog.s3.region,
        "s3.region": s3_catalog.s3.region,
        "s3.path-style-access": "true",
        "s3.endpoint": s3_catalog.s3.endpoint,
    }
    secret = s3_catalog.s3.credentials.secret_access_key.get_secret_value()
    assert secret not in str(config)


def test_pyiceberg_with_vended_keys_writes_metadata_and_data_to_s3(
    s3_catalog: S3CatalogServer,
) -> None:
    catalog = s3_catalog.pyiceberg_catalog()  # uri + client credential, nothing about S3
    ns = new_namespace(catalog)
    table = catalog.create_table((ns, "t"), SCHEMA)
    assert table.location().startswith(s3_catalog.warehouse + "/")
    table.append(pa.table({"id": [1, 2], "name": ["a", "b"]}, schema=SCHEMA))
    table.append(pa.table({"id": [3], "name": ["c"]}, schema=SCHEMA))
    reread = s3_catalog.pyiceberg_catalog(name="again").load_table((ns, "t"))
    assert sorted(reread.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    assert reread.metadata_location.startswith(s3_catalog.warehouse + "/")
    keys = [k for k in _keys(s3_catalog) if f"/{ns}" in k]
    assert sum(k.endswith(".metadata.json") for k in keys) == 3  # create + 2 appends
    assert sum(k.endswith(".parquet") for k in keys) == 2


def test_load_table_vends_keys_only_when_asked(s3_catalog: S3CatalogServer) -> None:
    catalog = s3_catalog.pyiceberg_catalog(vended=False)  # brings its own keys
    ns = new_namespace(catalog)
    catalog.create_table((ns, "t"), SCHEMA).append(pa.table({"id": [7], "name": ["x"]}))
    url = f"{s3_catalog.uri}/v1/namespaces/{ns}/tables/t"
    bearer = {"Authorization": f"Bearer {_token(s3_catalog)}"}
    plain = requests.get(url, headers=bearer, timeout=10).json()
    assert plain["storage-credentials"] == []
    assert "s3.secret-access-key" not in plain["config"]
    assert plain["config"]["s3.endpoint"] == s3_catalog.s3.endpoint
    asked = requests.get(
        url, headers={**bearer, ACCESS_DELEGATION_HEADER: "vended-credentials"}, timeout=10
    ).json()
    (credential,) = asked["storage-credentials"]
    assert credential["prefix"] == s3_catalog.warehouse + "/"
    assert credential["config"]["s3.access-key-id"] == s3_catalog.s3.credentials.access_key_id
    loaded = requests.get(f"{url}/credentials", headers=bearer, timeout=10).json()
    assert loaded["storage-credentials"] == asked["storage-credentials"]
    anonymous = requests.get(url, headers={ACCESS_DELEGATION_HEADER: "vended-credentials"})
    assert anonymous.status_code == 401


def _duckdb(server: S3CatalogServer, vended: bool) -> duckdb.DuckDBPyConnection:
    con = duckdb_connection()
    con.execute(
        "CREATE SECRET cat (TYPE iceberg, CLIENT_ID ?, CLIENT_SECRET ?, OAUTH2_SERVER_URI ?)",
        [server.client_id, server.client_secret, f"{server.uri}/v1/oauth/tokens"],
    )
    options = "" if vended else ", ACCESS_DELEGATION_MODE 'none'"
    con.execute(
        f"ATTACH 'warehouse' AS lake (TYPE iceberg, ENDPOINT '{server.uri}', SECRET cat{options})"
    )
    return con


def test_duckdb_reads_with_only_the_catalog_url_and_credential(
    s3_catalog: S3CatalogServer,
) -> None:
    catalog = s3_catalog.pyiceberg_catalog()
    ns = new_namespace(catalog)
    table = catalog.create_table((ns, "t"), SCHEMA)
    table.append(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}, schema=SCHEMA))
    con = _duckdb(s3_catalog, vended=True)
    try:
        assert con.sql(f"SELECT sum(id), count(*) FROM lake.{ns}.t").fetchall() == [(6, 3)]
    finally:
        con.close()


def test_duckdb_with_its_own_s3_secret_and_no_vending(s3_catalog: S3CatalogServer) -> None:
    catalog = s3_catalog.pyiceberg_catalog(vended=False)
    ns = new_namespace(catalog)
    table = catalog.create_table((ns, "t"), SCHEMA)
    table.append(pa.table({"id": [4, 5], "name": ["d", "e"]}, schema=SCHEMA))
    con = _duckdb(s3_catalog, vended=False)
    try:
        duckdb_s3_secret(con, s3_catalog.s3)
        assert con.sql(f"SELECT sum(id) FROM lake.{ns}.t").fetchall() == [(9,)]
    finally:
        con.close()
