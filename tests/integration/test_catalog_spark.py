"""Spark 3.5 + Iceberg runtime using the server as a REST catalog, interoperating with pyiceberg."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from tests.fixtures.catalog import CatalogServer, unique_namespace

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.slow


def _spark_table(
    spark: SparkSession, spark_catalog: str, name: str, columns: str
) -> tuple[str, str]:
    """Spark creates a new namespace and in it table `name` (`columns` in Spark DDL):
    the namespace and the table's full name."""
    ns = unique_namespace()
    spark.sql(f"CREATE NAMESPACE {spark_catalog}.{ns}")
    table = f"{spark_catalog}.{ns}.{name}"
    spark.sql(f"CREATE TABLE {table} ({columns}) USING iceberg")
    return ns, table


def test_spark_writes_merges_maintains_and_pyiceberg_reads(
    spark: SparkSession, spark_catalog: str, catalog_server: CatalogServer
) -> None:
    ns, table = _spark_table(spark, spark_catalog, "orders", "id BIGINT, status STRING")
    assert [r.tableName for r in spark.sql(f"SHOW TABLES IN {spark_catalog}.{ns}").collect()] == [
        "orders"
    ]

    df = spark.createDataFrame([(1, "new"), (2, "new")], "id BIGINT, status STRING")
    df.writeTo(table).option("snapshot-property.tableflow.offsets", "p0:2").append()
    spark.sql(f"""
        MERGE INTO {table} t
        USING (SELECT 2L AS id, 'paid' AS status UNION ALL SELECT 3L, 'new') s ON t.id = s.id
        WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *
    """)
    spark.sql(
        f"CALL {spark_catalog}.system.rewrite_data_files(table => '{ns}.orders', options => map('min-input-files', '1'))"
    )
    expired = spark.sql(
        f"CALL {spark_catalog}.system.expire_snapshots(table => '{ns}.orders', "
        "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)"
    ).collect()
    assert expired[0].deleted_manifest_lists_count >= 1

    pyiceberg_table = catalog_server.pyiceberg_catalog().load_table((ns, "orders"))
    rows = sorted(pyiceberg_table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "status": "new"},
        {"id": 2, "status": "paid"},
        {"id": 3, "status": "new"},
    ]
    assert len(pyiceberg_table.snapshots()) == 1  # expire_snapshots kept only the rewrite


def test_snapshot_property_lands_in_summary_and_spark_reads_pyiceberg_writes(
    spark: SparkSession, spark_catalog: str, catalog_server: CatalogServer
) -> None:
    ns, table = _spark_table(spark, spark_catalog, "events", "id BIGINT")
    spark.range(3).writeTo(table).option("snapshot-property.tableflow.run", "r1").append()

    catalog = catalog_server.pyiceberg_catalog()
    pyiceberg_table = catalog.load_table((ns, "events"))
    snapshot = pyiceberg_table.current_snapshot()
    assert snapshot is not None
    summary = snapshot.summary
    assert summary is not None and summary["tableflow.run"] == "r1"

    pyiceberg_table.append(pa.table({"id": pa.array([10, 11], pa.int64())}))
    ids = sorted(r.id for r in spark.sql(f"SELECT id FROM {table}").collect())
    assert ids == [0, 1, 2, 10, 11]
    spark.sql(f"DROP TABLE {table} PURGE")
    assert not catalog.table_exists((ns, "events"))
