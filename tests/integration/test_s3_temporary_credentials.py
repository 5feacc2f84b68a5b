"""The catalog vends temporary, table-scoped credentials (STS AssumeRole), and the store checks them.

Real processes: s3proxy, the STS gateway in front of it (`tests/support/sts_gateway.py`: mints and
checks session credentials), the catalog server started with `--sts-role-arn` and
`--sts-endpoint <gateway>`. Clients get only the catalog URL and the OAuth2 credential:
pyiceberg and Spark (Iceberg 1.12.0 S3FileIO, which refreshes through the catalog's
credentials endpoint) write and read; what a vended credential may not do (another
table's files, a wrong token, after expiry) is refused by the gateway.
"""

from __future__ import annotations

import time
from typing import Any

import boto3
import pyarrow as pa
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError
from pyiceberg.catalog.rest import RestCatalog

from tableflow_core.dev.producer import produce_sample
from tableflow_core.pipeline.data_files import file_io_properties, slim_metadata, write_data_files
from tableflow_core.pipeline.vended_credentials import (
    CredentialRefresh,
    expiring,
    refresh_table_io,
)
from tableflow_core.readers.duckdb_reader import attach_rest_catalog, duckdb_connection
from tests.fixtures.apply_env import run_cli
from tests.fixtures.catalog import client_credentials_grant, unique_namespace
from tests.fixtures.lake import Lake
from tests.fixtures.projects import StackProject
from tests.fixtures.s3_catalog import STS_CREDENTIAL_SECONDS as LIFETIME
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.spark_sql_runner import run_spark_sql
from tests.support.sts_gateway import StsGateway

pytestmark = pytest.mark.slow


def load_table_answer(catalog: S3CatalogServer, namespace: str, table: str) -> dict[str, Any]:
    token = client_credentials_grant(catalog.uri, catalog.client_id, catalog.client_secret)[
        "access_token"
    ]
    answer = requests.get(
        f"{catalog.uri}/v1/namespaces/{namespace}/tables/{table}",
        headers={
            "Authorization": f"Bearer {token}",
            "X-Iceberg-Access-Delegation": "vended-credentials",
        },
        timeout=10,
    )
    answer.raise_for_status()
    document: dict[str, Any] = answer.json()
    document["_token"] = token
    return document


def s3_with(config: dict[str, str], endpoint: str, token: str | None = "keep") -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=config["s3.access-key-id"],
        aws_secret_access_key=config["s3.secret-access-key"],
        aws_session_token=config["s3.session-token"] if token == "keep" else token,
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
    )


def error_code(call: Any) -> str:
    with pytest.raises(ClientError) as refused:
        call()
    return str(refused.value.response["Error"]["Code"])


def test_vended_credentials_are_temporary_scoped_and_checked(
    sts_catalog: S3CatalogServer, sts_gateway: StsGateway
) -> None:
    catalog: RestCatalog = sts_catalog.pyiceberg_catalog()  # URL + credential only
    namespace = unique_namespace("sts")
    catalog.create_namespace(namespace)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string())])
    rows = pa.Table.from_pylist([{"id": i, "s": f"v{i}"} for i in range(50)], schema=schema)
    for name in ("a", "b"):
        catalog.create_table((namespace, name), schema=schema).append(rows)
    assert catalog.load_table((namespace, "a")).scan().to_arrow().sort_by("id").equals(rows)

    started_ms = time.time() * 1000
    answer = load_table_answer(sts_catalog, namespace, "a")
    config = answer["config"]
    location = answer["metadata"]["location"]
    assert config["s3.access-key-id"].startswith("ASIA")
    assert config["s3.access-key-id"] != sts_catalog.s3.credentials.access_key_id
    expires_ms = int(config["s3.session-token-expires-at-ms"])
    assert started_ms + LIFETIME * 1000 * 0.4 < expires_ms <= started_ms + LIFETIME * 1000 + 2000
    assert config["client.refresh-credentials-endpoint"] == (
        f"v1/namespaces/{namespace}/tables/a/credentials"
    )
    (vended,) = answer["storage-credentials"]
    assert vended["prefix"] == location + "/"
    assert vended["config"]["s3.session-token"] == config["s3.session-token"]

    s3 = s3_with(config, sts_gateway.endpoint)
    bucket = location.split("/")[2]
    own = s3.list_objects_v2(Bucket=bucket, Prefix=location.split("/", 3)[3] + "/")
    keys = [o["Key"] for o in own["Contents"]]
    assert any(k.endswith(".parquet") for k in keys) and any("metadata" in k for k in keys)
    assert s3.get_object(Bucket=bucket, Key=keys[0])["Body"].read()

    other = catalog.load_table((namespace, "b")).metadata.location.split("/", 3)[3]
    assert error_code(lambda: s3.list_objects_v2(Bucket=bucket, Prefix=other + "/")) == (
        "AccessDenied"
    )
    other_file = keys[0].replace(location.split("/", 3)[3], other)
    assert error_code(lambda: s3.get_object(Bucket=bucket, Key=other_file)) == "AccessDenied"
    assert error_code(lambda: s3.put_object(Bucket=bucket, Key="elsewhere", Body=b"x")) == (
        "AccessDenied"
    )
    wrong = s3_with(config, sts_gateway.endpoint, token="not-the-token")
    assert error_code(lambda: wrong.get_object(Bucket=bucket, Key=keys[0])) == "InvalidToken"
    bad_secret = s3_with({**config, "s3.secret-access-key": "x" * 40}, sts_gateway.endpoint)
    assert error_code(lambda: bad_secret.get_object(Bucket=bucket, Key=keys[0])) == (
        "SignatureDoesNotMatch"
    )
    # Straight to s3proxy, the token is refused outright: only the gateway knows it.
    direct = s3_with(config, sts_catalog.s3.endpoint)
    assert error_code(lambda: direct.get_object(Bucket=bucket, Key=keys[0])) in (
        "NotImplemented",
        "InvalidAccessKeyId",
    )

    # Expiry: the old credentials stop working; the refresh endpoint hands out new ones.
    time.sleep(max(0.0, expires_ms / 1000 - time.time()) + 0.5)
    assert error_code(lambda: s3.get_object(Bucket=bucket, Key=keys[0])) == "ExpiredToken"
    refreshed = requests.get(
        f"{sts_catalog.uri}/{config['client.refresh-credentials-endpoint']}",
        headers={"Authorization": f"Bearer {answer['_token']}"},
        timeout=10,
    ).json()["storage-credentials"][0]["config"]
    assert refreshed["s3.access-key-id"] != config["s3.access-key-id"]
    assert int(refreshed["s3.session-token-expires-at-ms"]) > time.time() * 1000
    assert s3_with(refreshed, sts_gateway.endpoint).get_object(Bucket=bucket, Key=keys[0])
    # pyiceberg re-loads the table (and its credentials) for each scan.
    assert catalog.load_table((namespace, "a")).scan().to_arrow().num_rows == 50
    # DuckDB (`tableflow query`'s reader): catalog URL and credential, vended keys.
    minted_requests = sts_gateway.accepted_minted
    con = duckdb_connection()
    attach_rest_catalog(con, "lake", sts_catalog.uri, sts_catalog.credential)
    assert con.execute(f"SELECT count(*), sum(id) FROM lake.{namespace}.a").fetchall() == [
        (50, sum(range(50)))
    ]
    assert sts_gateway.accepted_minted > minted_requests


def test_spark_writes_and_refreshes_vended_temporary_credentials(
    sts_catalog: S3CatalogServer, sts_gateway: StsGateway
) -> None:
    """A Spark job longer than the credentials' lifetime: S3FileIO refreshes them through
    the catalog (`client.refresh-credentials-endpoint`), writes and merges throughout."""
    namespace = unique_namespace("sts_spark")
    sts_catalog.pyiceberg_catalog().create_namespace(namespace)
    conf = sts_catalog.vended_spark_conf()
    t = f"lake.{namespace}.events"
    minted_before = sts_gateway.minted_count()
    refusals_before = len(sts_gateway.refusals)
    result = run_spark_sql(
        conf,
        [
            f"CREATE TABLE {t} (id BIGINT, v STRING) USING iceberg TBLPROPERTIES ("
            "'format-version'='2', 'write.merge.mode'='merge-on-read')",
            f"INSERT INTO {t} SELECT id, CAST(id AS STRING) FROM range(0, 1000)",
            # One write whose task produces its rows after the credentials it started
            # with expired: its data file goes up with refreshed ones, or not at all.
            f"INSERT INTO {t} SELECT id, IF(id = 1000 AND java_method('java.lang.Thread', "
            f"'sleep', {LIFETIME * 1000 + 3000}L) IS NOT NULL, 'never', 'late') "
            "FROM range(1000, 1100)",
            f"MERGE INTO {t} t USING (SELECT id FROM range(0, 1100, 2)) s ON t.id = s.id "
            "WHEN MATCHED THEN DELETE",
            f"SELECT count(*), sum(id), count_if(v = 'late') FROM {t}",
        ],
    )
    ids = [i for i in range(1100) if i % 2]
    assert result["results"][-1] == [[len(ids), sum(ids), 50]]
    assert sts_gateway.minted_count() > minted_before
    assert sts_gateway.refusals[refusals_before:] == []  # nothing refused, no expired request
    refreshes = [
        line
        for line in sts_catalog.process.log_file.read_text().splitlines()
        if f"GET /v1/namespaces/{namespace}/tables/events/credentials" in line
    ]
    assert refreshes, "S3FileIO never asked the catalog's refresh endpoint"
    table = sts_catalog.pyiceberg_catalog().load_table((namespace, "events"))
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == ids


def test_pyiceberg_writers_fetch_credentials_again_before_they_expire(
    sts_catalog: S3CatalogServer, sts_gateway: StsGateway
) -> None:
    """pyiceberg's FileIO does not refresh vended credentials: a shared job's tasks and the
    driver's publish ask the catalog's refresh endpoint for them again (with the catalog
    client's token) when they are about to expire, and write with the new ones."""
    namespace = unique_namespace("sts_refresh")
    catalog = sts_catalog.pyiceberg_catalog()
    catalog.create_namespace(namespace)
    catalog.create_table((namespace, "events"), pa.schema([("id", pa.int64())]))
    table = catalog.load_table((namespace, "events"))
    refresh = CredentialRefresh.of(table)
    assert refresh is not None and "Bearer" not in repr(refresh)
    loaded = file_io_properties(table.io.properties)
    assert expiring(loaded)  # the stack's credentials live 20 s, under the margin
    refusals_before = len(sts_gateway.refusals)
    time.sleep(LIFETIME + 1)
    # The credentials of the load are expired: a write with them is refused ...
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    with pytest.raises(OSError, match=r"(?i)expired"):
        write_data_files(slim_metadata(table.metadata), loaded, rows)
    # ... a task's writer with the refresh asks the catalog again and writes.
    current = refresh.current(loaded)
    assert int(current["s3.session-token-expires-at-ms"]) > time.time() * 1000
    files = write_data_files(slim_metadata(table.metadata), current, rows)
    # The driver's table gets a new FileIO the same way, and commits the files with it.
    refresh_table_io(table)
    with table.transaction() as transaction, transaction.update_snapshot().fast_append() as add:
        for data_file in files:
            add.append_data_file(data_file)
    assert sorted(
        catalog.load_table((namespace, "events")).scan().to_arrow()["id"].to_pylist()
    ) == [1, 2, 3]
    refreshes = [
        line
        for line in sts_catalog.process.log_file.read_text().splitlines()
        if f"GET /v1/namespaces/{namespace}/tables/events/credentials" in line
    ]
    assert len(refreshes) >= 2, refreshes
    assert len(sts_gateway.refusals) == refusals_before + 1  # the one expired write


@pytest.fixture
def lake(sts_catalog: S3CatalogServer) -> Lake:
    """Projects of this module write through the catalog that vends temporary keys."""
    return Lake("s3", sts_catalog, "tf_sts", {"credentials": "vended"})


def test_a_long_tableflow_run_outlives_its_credentials(
    sts_catalog: S3CatalogServer,
    sts_gateway: StsGateway,
    stack_project: StackProject,
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistryServer,
) -> None:
    """`tableflow run` keeps one Spark session and one catalog client for all its cycles;
    its cycles span several credential lifetimes and every record still lands once."""
    topic = unique_name("sts_run")
    namespace = unique_namespace("sts_run")
    produce_sample("orders", kafka_broker.bootstrap, schema_registry.url, topic, 120, partitions=2)
    table = {"name": "orders", "topic": topic, "refresh_interval": f"{LIFETIME // 2}s",
             "max_records_per_run": 30, "metadata_columns": ["partition", "offset"]}  # fmt: skip
    root = stack_project(namespace=namespace, tables=[table], name=unique_name("sts_run"))
    refused_before = len(sts_gateway.refusals)
    started = time.monotonic()
    status, output = run_cli(root, "run", "--max-cycles", "5")
    assert status == 0, output[-3000:]
    assert time.monotonic() - started > 2 * LIFETIME  # the run outlived two lifetimes
    rows = sts_catalog.pyiceberg_catalog().load_table((namespace, "orders")).scan().to_arrow()
    offsets = sorted(
        zip(rows["_kafka_partition"].to_pylist(), rows["_kafka_offset"].to_pylist(), strict=True)
    )
    assert len(offsets) == 120 and len(set(offsets)) == 120
    assert sts_gateway.refusals[refused_before:] == []
