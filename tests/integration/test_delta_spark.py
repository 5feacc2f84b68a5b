"""Delta log over Spark-written Iceberg tables: hidden partitioning, compaction, deletes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tableflow_core.delta import DeltaSyncError, sync_delta_log
from tests.fixtures.catalog import CatalogServer, unique_namespace
from tests.integration.test_delta_sync import assert_same_rows, delta_version

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.slow


def _create(spark: SparkSession, spark_catalog: str, name: str, clause: str) -> tuple[str, str]:
    """A new namespace holding table `name` (id, name, ts) created with `clause`:
    (namespace, the table's Spark name)."""
    ns = unique_namespace("delta")
    table = f"{spark_catalog}.{ns}.{name}"
    spark.sql(f"CREATE NAMESPACE {spark_catalog}.{ns}")
    spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING, ts TIMESTAMP) USING iceberg {clause}")
    return ns, table


def _insert(spark: SparkSession, table: str, ids: range, extra: bool = False) -> None:
    values = ", ".join(
        f"({i}, 'n{i}', TIMESTAMP '2024-01-0{1 + i % 3} 10:00:00'"
        + (f", {i * 10})" if extra else ")")
        for i in ids
    )
    spark.sql(f"INSERT INTO {table} VALUES {values}")


def test_partitioned_spark_table_through_appends_evolution_and_compaction(
    spark: SparkSession, spark_catalog: str, catalog_server: CatalogServer
) -> None:
    ns, table = _create(spark, spark_catalog, "clicks", "PARTITIONED BY (days(ts))")
    catalog = catalog_server.pyiceberg_catalog()

    def load():  # type: ignore[no-untyped-def]
        return catalog.load_table((ns, "clicks"))

    _insert(spark, table, range(0, 6))
    _insert(spark, table, range(6, 9))
    first = sync_delta_log(load())
    # One file per day partition per insert, under data/ts_day=.../
    assert first.files_added >= 4
    assert len(assert_same_rows(load())) == 9

    spark.sql(f"ALTER TABLE {table} ADD COLUMN score BIGINT")
    _insert(spark, table, range(9, 12), extra=True)
    evolved = sync_delta_log(load())
    assert evolved.columns_added == ("score",)
    rows = assert_same_rows(load())
    assert [r["score"] for r in rows] == [None] * 9 + [90, 100, 110]

    live_before = first.files_added + evolved.files_added
    spark.sql(
        f"CALL {spark_catalog}.system.rewrite_data_files(table => '{ns}.clicks', "
        "options => map('min-input-files', '1'))"
    )
    compacted = sync_delta_log(load())
    assert compacted.files_removed == live_before
    assert 1 <= compacted.files_added < live_before
    assert len(assert_same_rows(load())) == 12

    from deltalake import DeltaTable

    from tableflow_core.delta.files import normalize_location

    root = normalize_location(load().metadata.location)
    version = DeltaTable(root).version()
    log = Path(root, "_delta_log", f"{version:020d}.json").read_text().splitlines()
    actions = [json.loads(line) for line in log]
    changes = [a.get("add", a.get("remove")) for a in actions if "add" in a or "remove" in a]
    # A pure compaction is a rearrangement: Delta streaming readers must not re-read it.
    assert changes and all(change["dataChange"] is False for change in changes)
    assert not sync_delta_log(load()).committed


def test_merge_on_read_deletes_are_refused_until_compacted(
    spark: SparkSession, spark_catalog: str, catalog_server: CatalogServer
) -> None:
    ns, table = _create(
        spark,
        spark_catalog,
        "orders",
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')",
    )
    catalog = catalog_server.pyiceberg_catalog()
    _insert(spark, table, range(0, 6))
    sync_delta_log(catalog.load_table((ns, "orders")))
    location = catalog.load_table((ns, "orders")).metadata.location
    version = delta_version(location)

    spark.sql(f"DELETE FROM {table} WHERE id < 2")
    with pytest.raises(DeltaSyncError, match="delete file"):
        sync_delta_log(catalog.load_table((ns, "orders")))
    assert delta_version(location) == version

    spark.sql(
        f"CALL {spark_catalog}.system.rewrite_data_files(table => '{ns}.orders', "
        "options => map('min-input-files', '1', 'delete-file-threshold', '1'))"
    )
    result = sync_delta_log(catalog.load_table((ns, "orders")))
    assert result.committed
    assert [r["id"] for r in assert_same_rows(catalog.load_table((ns, "orders")))] == [2, 3, 4, 5]
