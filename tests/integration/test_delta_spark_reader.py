"""delta-spark (Spark's own Delta reader, a third one beside delta-rs and DuckDB) reads
Delta tables written by deltalake (delta-rs) on local disk and on s3proxy, and the Delta
mirror tableflow writes over an Iceberg table's own Parquet files on S3.

delta-spark 3.3.2 (lock `delta-spark`) for Spark 3.5 in a Spark process of its own, S3
through Hadoop's s3a (lock `hadoop-s3a`: hadoop-aws 3.3.4 + aws-java-sdk-bundle 1.12.262,
the versions Spark 3.5's Hadoop 3.3.4 was built with). Rows are compared value by value
with what deltalake (and, for the mirror, pyiceberg) reads.

Found here: delta-spark refuses delta-rs's tables as written (delta-rs 1.6.6's
protocol omits the `invariants` writer feature that a NOT NULL column implies once a
timestamp-without-zone column lifts the table to writer version 7); after
`alter.add_feature(Invariants)` it reads them. The mirror lists the feature itself, so
delta-spark reads it as written.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, TableFeatures, write_deltalake

from tableflow_core.delta import sync_delta_log
from tableflow_core.jvm.artifacts import ensure, load_lock
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.iceberg_values import SAMPLE_ARROW_SCHEMA, sample_row
from tests.spark_sql_runner import run_spark_sql

pytestmark = pytest.mark.slow

# The sample types the Delta mirror can carry (Delta has no time or fixed type).
MIRROR_COLUMNS = [f.name for f in SAMPLE_ARROW_SCHEMA if f.name not in ("t", "fx")]
MIRROR_SCHEMA = pa.schema([SAMPLE_ARROW_SCHEMA.field(n) for n in MIRROR_COLUMNS])


def as_json_value(value: Any) -> Any:
    """A pyarrow Python value in the shape tests/spark_sql_runner.py prints Spark's in."""
    if isinstance(value, dict):
        return {k: as_json_value(v) for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        return [[as_json_value(k), as_json_value(v)] for k, v in value]  # a map
    if isinstance(value, list | tuple):
        return [as_json_value(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:  # the Spark session's time zone is UTC
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return value


MAP_COLUMN = MIRROR_COLUMNS.index("mp")


def _sorted(rows: list[list[Any]]) -> list[list[Any]]:
    """Rows by id, each map's entries in key order (maps have no order)."""
    for row in rows:
        if row[MAP_COLUMN] is not None:
            row[MAP_COLUMN] = sorted(row[MAP_COLUMN])
    return sorted(rows, key=lambda r: r[0])


def rows_of(table: pa.Table, columns: list[str]) -> list[list[Any]]:
    return _sorted([[as_json_value(r[c]) for c in columns] for r in table.to_pylist()])


def _normalize_spark(rows: list[list[Any]]) -> list[list[Any]]:
    return _sorted(rows)


def _delta_spark_conf(s3: S3CatalogServer) -> dict[str, str]:
    jars = [*ensure(load_lock("delta-spark")).files, *ensure(load_lock("hadoop-s3a")).files]
    server = s3.s3
    return {
        "spark.jars": ",".join(str(j) for j in jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.hadoop.fs.s3a.endpoint": server.endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": server.region,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": server.credentials.access_key_id,
        "spark.hadoop.fs.s3a.secret.key": server.credentials.secret_access_key.get_secret_value(),
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        ),
    }


def test_delta_spark_reads_delta_rs_tables_and_the_delta_mirror(
    tmp_path: Path, s3_catalog: S3CatalogServer
) -> None:
    rows = [sample_row(i) for i in range(120)]
    batch1 = pa.Table.from_pylist(rows[:60], schema=MIRROR_SCHEMA)
    batch2 = pa.Table.from_pylist(rows[60:], schema=MIRROR_SCHEMA)
    server = s3_catalog.s3
    s3_options = {
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_REGION": server.region,
        "AWS_ACCESS_KEY_ID": server.credentials.access_key_id,
        "AWS_SECRET_ACCESS_KEY": server.credentials.secret_access_key.get_secret_value(),
        "AWS_ALLOW_HTTP": "true",
    }

    # 1. delta-rs on local disk: two appends and a delete (a rewrite of the files).
    local = tmp_path / "local_delta"
    write_deltalake(str(local), batch1)
    write_deltalake(str(local), batch2, mode="append")
    DeltaTable(str(local)).delete("id % 10 = 7")
    # 2. delta-rs on s3proxy.
    on_s3 = f"s3://{server.bucket}/delta-{uuid.uuid4().hex[:10]}/t"
    write_deltalake(on_s3, batch1, storage_options=s3_options)
    write_deltalake(on_s3, batch2, mode="append", storage_options=s3_options)
    # 3. tableflow's Delta mirror over an Iceberg table (pyiceberg writes) on s3proxy.
    catalog = s3_catalog.pyiceberg_catalog()
    ns = unique_namespace("mirror")
    catalog.create_namespace(ns)
    iceberg = catalog.create_table((ns, "orders"), schema=MIRROR_SCHEMA)
    iceberg.append(batch1)
    iceberg.append(batch2)
    iceberg = catalog.load_table((ns, "orders"))
    mirror = sync_delta_log(iceberg, storage_options=s3_options)
    assert mirror.committed

    # delta-rs writes protocol (3, 7) listing only `timestampNtz` for a table with a
    # timestamp-without-zone column, while a NOT NULL column needs `invariants` listed too
    # at writer version 7: delta-spark refuses delta-rs's own tables until it is added.
    # The mirror lists it itself (tableflow_core/delta/sync.py), so delta-spark reads it as
    # written.
    columns = ", ".join(f"`{c}`" for c in MIRROR_COLUMNS)
    s3a = lambda uri: "s3a://" + uri.removeprefix("s3://")  # noqa: E731
    conf = _delta_spark_conf(s3_catalog)
    tables = {"local": str(local), "s3": s3a(on_s3), "mirror": s3a(mirror.location)}
    before = run_spark_sql(
        conf,
        [f"SELECT count(*) FROM delta.`{path}`" for path in tables.values()],
        collect_errors=True,
    )["results"]
    for name in ("local", "s3"):
        result = before[list(tables).index(name)]
        assert isinstance(result, dict), (name, result)
        assert "DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH" in result["error"], result
        assert "invariants" in result["error"], result
    assert before[list(tables).index("mirror")] == [[120]]
    protocol = DeltaTable(mirror.location, storage_options=s3_options).protocol()
    assert "invariants" in (protocol.writer_features or []), protocol

    for uri, options in ((str(local), None), (on_s3, s3_options)):
        DeltaTable(uri, storage_options=options).alter.add_feature(
            TableFeatures.Invariants, allow_protocol_versions_increase=True
        )
    result = run_spark_sql(
        conf,
        [
            *(f"SELECT {columns} FROM delta.`{path}`" for path in tables.values()),
            f"DESCRIBE HISTORY delta.`{tables['mirror']}`",
        ],
    )
    spark_local, spark_s3, spark_mirror, history = result["results"]

    expected_local = rows_of(DeltaTable(str(local)).to_pyarrow_table(), MIRROR_COLUMNS)
    assert len(expected_local) == 120 - 12
    assert _normalize_spark(spark_local) == expected_local

    expected_s3 = rows_of(
        DeltaTable(on_s3, storage_options=s3_options).to_pyarrow_table(), MIRROR_COLUMNS
    )
    assert len(expected_s3) == 120
    assert _normalize_spark(spark_s3) == expected_s3

    # The mirror: delta-spark, delta-rs and pyiceberg (Iceberg's own read) agree.
    mirror_rs = DeltaTable(mirror.location, storage_options=s3_options).to_pyarrow_table()
    expected_mirror = rows_of(iceberg.scan().to_arrow(), MIRROR_COLUMNS)
    assert len(expected_mirror) == 120
    assert rows_of(mirror_rs, MIRROR_COLUMNS) == expected_mirror
    assert _normalize_spark(spark_mirror) == expected_mirror
    assert len(history) == mirror.version + 1  # versions 0..n, the feature among them
