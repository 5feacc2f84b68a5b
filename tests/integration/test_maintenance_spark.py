"""Maintenance through real Spark + the Iceberg runtime on the real REST catalog server.

Commits are made the way ingest makes them (the offsets in the snapshot summary);
results are read back with pyiceberg and DuckDB, and the committed offsets with the
plan's JVM-free reader.
"""

from __future__ import annotations

import base64
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tableflow_core.config.models.maintenance import CompactSettings, Maintenance
from tableflow_core.engine.spark_session import register_catalog
from tableflow_core.maintenance import maintenance_due, run_maintenance
from tableflow_core.maintenance.activity import data_file_sizes
from tableflow_core.maintenance.last_run import last_runs
from tableflow_core.maintenance.operations import OPERATIONS, spark_file_sizes, tiered_compaction
from tableflow_core.maintenance.target import SparkTable
from tableflow_core.maintenance.tiers import TIER_RATIO, tier_bounds, tier_of
from tableflow_core.readers.duckdb_reader import create_s3_secret
from tableflow_core.state.offsets import OFFSETS_KEY, encode_offsets, read_committed_offsets
from tests.fixtures.catalog import CatalogServer, unique_namespace
from tests.unit.test_engine_helpers import duckdb_connection
from tests.unit.test_maintenance_schedule import table_with

pytestmark = pytest.mark.slow
CATALOG = "tf_maint"
TOPIC = "orders"


@pytest.fixture(scope="module")
def namespace(spark: Any, catalog_server: CatalogServer) -> str:
    register_catalog(spark, CATALOG, catalog_server.spark_properties())
    name = unique_namespace("maint")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{name}")
    return name


def small_commits(spark: Any, identifier: str, commits: int, rows_per_commit: int = 5) -> None:
    """`commits` appends of a few rows, each carrying its offsets like an ingest commit."""
    spark.sql(
        f"CREATE TABLE {identifier} (id BIGINT, part INT, name STRING) USING iceberg "
        "PARTITIONED BY (part) TBLPROPERTIES ('format-version' = '2')"
    )
    for commit in range(commits):
        start = commit * rows_per_commit
        rows = [(i, i % 2, f"n{i}") for i in range(start, start + rows_per_commit)]
        offsets = {0: start + rows_per_commit, 1: start + rows_per_commit}
        (
            spark.createDataFrame(rows, "id long, part int, name string")
            .writeTo(identifier)
            .option(f"snapshot-property.{OFFSETS_KEY}", encode_offsets(TOPIC, offsets))
            .append()
        )


def data_files(catalog: Any, name: str) -> int:
    table = catalog.load_table(name)
    return len(table.inspect.files())


def read_rows(catalog: Any, name: str) -> tuple[int, int]:
    """(rows, sum(id)) by pyiceberg, checked against DuckDB on the same metadata (on S3 with
    the keys pyiceberg's FileIO has: the catalog's vended ones)."""
    table = catalog.load_table(name)
    arrow = table.scan().to_arrow()
    by_pyiceberg = (arrow.num_rows, sum(arrow["id"].to_pylist()))
    con = duckdb_connection()
    io = table.io.properties
    if table.metadata_location.startswith("s3://"):
        endpoint = io["s3.endpoint"]
        create_s3_secret(
            con,
            [
                ("KEY_ID", io["s3.access-key-id"]),
                ("SECRET", io["s3.secret-access-key"]),
                ("REGION", io.get("s3.region", "us-east-1")),
                ("ENDPOINT", endpoint.split("://", 1)[1]),
                ("URL_STYLE", "path"),
                ("USE_SSL", endpoint.startswith("https://")),
            ],
        )
    rows, ids = con.execute(
        f"SELECT count(*), coalesce(sum(id), 0) FROM iceberg_scan('{table.metadata_location}')"
    ).fetchone()  # type: ignore[misc]
    assert (rows, ids) == by_pyiceberg
    return by_pyiceberg


def test_compaction_and_expiry_keep_rows_and_offsets(
    spark: Any, catalog_server: CatalogServer, namespace: str
) -> None:
    name = f"{namespace}.compacted"
    identifier = f"{CATALOG}.{name}"
    small_commits(spark, identifier, 22)
    catalog = catalog_server.pyiceberg_catalog()
    files_before = data_files(catalog, name)
    rows_before = read_rows(catalog, name)
    offsets_before = read_committed_offsets(catalog.load_table(name), TOPIC)
    assert files_before == 44 and rows_before == (110, sum(range(110)))
    assert offsets_before is not None and offsets_before.offsets == {0: 110, 1: 110}

    table = table_with(
        Maintenance.model_validate(
            {
                "compact": {"min_input_files": 2},
                # Deleted by this expiry, not kept for a later one (test_expired_files.py).
                "expire_snapshots": {"older_than": "1d", "retain_last": 1, "keep_files_for": "0s"},
                "rewrite_manifests": True,
            }
        )
    )
    now = datetime.now(UTC)
    due = maintenance_due(table, catalog.load_table(name).properties, now)
    assert [d.operation for d in due] == ["compact", "rewrite_manifests", "expire_snapshots"]
    # Expire everything older than a day from "tomorrow": only the current snapshot stays.
    report = run_maintenance(spark, identifier, due, now=lambda: now + timedelta(days=2))
    assert report.ok, report.summary_line()
    assert report.offsets_before == report.offsets_after == {0: 110, 1: 110}

    loaded = catalog.load_table(name)
    assert data_files(catalog, name) == 2  # one per partition
    assert read_rows(catalog, name) == rows_before
    assert len(loaded.metadata.snapshots) == 1
    # Expiry deleted the files only the expired snapshots had: the 44 compacted away, and
    # every manifest list but the current one.
    location = Path(loaded.location().removeprefix("file:"))
    on_disk = {str(f) for f in (location / "data").rglob("*.parquet")}
    assert on_disk == {
        f.removeprefix("file:") for f in loaded.inspect.files()["file_path"].to_pylist()
    }
    assert len(list((location / "metadata").glob("snap-*.avro"))) == 1
    found = read_committed_offsets(loaded, TOPIC)
    assert found is not None and found.offsets == {0: 110, 1: 110} and found.source == "property"
    assert report.metadata_location == loaded.metadata_location
    # The last runs are recorded; nothing is due again until `every` passes.
    assert set(last_runs(loaded.properties)) == {"compact", "rewrite_manifests", "expire_snapshots"}
    assert maintenance_due(table, loaded.properties, now + timedelta(days=2, minutes=1)) == []
    assert len(maintenance_due(table, loaded.properties, now + timedelta(days=2, hours=2))) == 3


def append_file(spark: Any, identifier: str, first_id: int, rows: int, part: int) -> None:
    """One data file of `rows` rows in partition `part`, its names random (incompressible:
    the file's size follows `rows`)."""
    data = [(first_id + i, part, base64.b64encode(os.urandom(36)).decode()) for i in range(rows)]
    spark.createDataFrame(data, "id long, part int, name string").coalesce(1).writeTo(
        identifier
    ).append()


def sizes_by_partition(sizes: list[list[int]]) -> list[list[int]]:
    return sorted(sorted(partition) for partition in sizes)


def test_compaction_merges_a_tier_once_it_holds_the_ratio(
    spark: Any, catalog_server: CatalogServer, namespace: str
) -> None:
    """Small files are compacted every time; files of a higher tier only once
    `TIER_RATIO` of them are there, with everything smaller. The sizes read by Spark's
    `data_files` table (`compact`) and by pyiceberg on the driver (`maintain`) agree."""
    name = f"{namespace}.tiered"
    identifier = f"{CATALOG}.{name}"
    small_commits(spark, identifier, 6, rows_per_commit=2)  # 6 tiny files a partition
    for i in range(TIER_RATIO - 1):
        append_file(spark, identifier, 1000 * (i + 1), 1000, part=0)
    catalog = catalog_server.pyiceberg_catalog()
    bounds = tier_bounds(CompactSettings().small_file_bytes)
    driver_sizes = data_file_sizes(catalog.load_table(name))
    spark_sizes = spark_file_sizes(spark, SparkTable.parse(identifier))
    assert sizes_by_partition(driver_sizes) == sizes_by_partition(spark_sizes)
    tiers = sorted(tier_of(size, bounds) for sizes in driver_sizes for size in sizes)
    assert tiers == [0] * 12 + [1] * (TIER_RATIO - 1), driver_sizes
    rows = read_rows(catalog, name)
    table = table_with(Maintenance.model_validate({"compact": {"min_input_files": 2}}))
    due = maintenance_due(table, catalog.load_table(name).properties, datetime.now(UTC))

    report = run_maintenance(spark, identifier, due)  # sizes by Spark
    assert report.ok, report.summary_line()
    assert report.results[0].metrics["files_under_bytes"] == bounds[0]
    after = data_file_sizes(catalog.load_table(name))
    # Each partition's tiny files became one; the files of tier 1 were left as they were.
    assert sorted(tier_of(size, bounds) for sizes in after for size in sizes) == [0, 0] + [1] * (
        TIER_RATIO - 1
    ), after
    assert read_rows(catalog, name) == rows

    append_file(spark, identifier, 9000, 1000, part=0)  # tier 1 holds TIER_RATIO files
    rows = read_rows(catalog, name)
    by_driver = tiered_compaction(lambda: data_file_sizes(catalog.load_table(name)))
    report = run_maintenance(spark, identifier, due, functions={**OPERATIONS, "compact": by_driver})
    assert report.ok, report.summary_line()
    assert report.results[0].metrics["files_under_bytes"] == bounds[1]
    after = data_file_sizes(catalog.load_table(name))
    # Partition 0: everything under tier 1's bound in one file of tier 2; partition 1's
    # one file had nothing to merge with.
    assert sorted(tier_of(size, bounds) for sizes in after for size in sizes) == [0, 2], after
    assert read_rows(catalog, name) == rows


def test_remove_orphans_keeps_delta_log_and_young_files(
    spark: Any, catalog_server: CatalogServer, namespace: str
) -> None:
    name = f"{namespace}.orphans"
    identifier = f"{CATALOG}.{name}"
    small_commits(spark, identifier, 3)
    catalog = catalog_server.pyiceberg_catalog()
    location = Path(catalog.load_table(name).location().removeprefix("file:"))
    old = time.time() - 10 * 86400
    orphan = location / "data" / "part=0" / "orphan-old.parquet"
    young = location / "data" / "part=0" / "in-flight-run.parquet"
    delta_log = location / "_delta_log"
    delta_log.mkdir()
    delta_entry = delta_log / "00000000000000000000.json"
    for path in (orphan, young, delta_entry):
        path.write_bytes(b"not referenced by any snapshot")
    for path in (orphan, delta_entry, delta_log):
        os.utime(path, (old, old))
    rows_before = read_rows(catalog, name)

    table = table_with(Maintenance.model_validate({"remove_orphans": {"older_than": "3d"}}))
    due = maintenance_due(table, catalog.load_table(name).properties, datetime.now(UTC))
    report = run_maintenance(spark, identifier, due)
    assert report.ok, report.summary_line()
    assert report.results[0].metrics["orphan_files_removed"] == 1
    assert not orphan.exists()
    assert young.exists()  # younger than older_than: may belong to a run in flight
    assert delta_entry.exists()
    assert read_rows(catalog, name) == rows_before


def merged_on_read(spark: Any, identifier: str, batches: int) -> None:
    """A partitioned merge-on-read table of 100 rows in 3 files, then `batches` MERGE
    batches: updates land as position deletes + new rows."""
    spark.sql(
        f"CREATE TABLE {identifier} (id BIGINT, part INT, name STRING) USING iceberg "
        "PARTITIONED BY (part) TBLPROPERTIES ('format-version' = '2', "
        "'write.merge.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read')"
    )
    rows = [(i, i % 2, f"n{i}") for i in range(100)]
    spark.createDataFrame(rows, "id long, part int, name string").repartition(3).writeTo(
        identifier
    ).append()
    for batch in range(batches):
        updates = [(i, i % 2, f"v{batch}") for i in range(batch, 100, 7)]
        spark.createDataFrame(updates, "id long, part int, name string").createOrReplaceTempView(
            "merge_updates"
        )
        spark.sql(
            f"MERGE INTO {identifier} t USING merge_updates u ON t.id = u.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )


def test_upsert_table_deletes_are_rewritten_and_compacted_away(
    spark: Any, catalog_server: CatalogServer, namespace: str
) -> None:
    name = f"{namespace}.upserts"
    identifier = f"{CATALOG}.{name}"
    merged_on_read(spark, identifier, batches=4)
    catalog = catalog_server.pyiceberg_catalog()

    def contents() -> list[int]:
        return catalog.load_table(name).inspect.files()["content"].to_pylist()

    assert contents().count(1) >= 2  # position delete files (min_delete_files below)
    expected = read_rows(catalog, name)
    names = sorted(catalog.load_table(name).scan().to_arrow()["name"].to_pylist())

    block = Maintenance.model_validate(
        {"compact": {"min_input_files": 2}, "rewrite_deletes": {"min_delete_files": 2}}
    )
    due = maintenance_due(table_with(block, mode="upsert"), {}, datetime.now(UTC))
    assert [d.operation for d in due] == ["compact", "rewrite_deletes"]
    report = run_maintenance(spark, identifier, due)
    assert report.ok, report.summary_line()
    assert contents().count(1) == 0  # deletes applied by compaction, dangling ones dropped
    assert read_rows(catalog, name) == expected
    assert sorted(catalog.load_table(name).scan().to_arrow()["name"].to_pylist()) == names


def test_deletes_spark_wrote_are_applied_on_the_driver(
    spark: Any, catalog_server: CatalogServer, namespace: str
) -> None:
    """`apply_deletes` (pipeline/apply_deletes.py) on what Spark writes: a partitioned
    merge-on-read table whose MERGE batches left position delete files (several per data
    file, a delete file naming several data files after their merge): every row equal by
    pyiceberg, DuckDB and Spark (reading the replace snapshot the driver committed), no
    delete file left, each new file in its old files' partition."""
    from tableflow_core.pipeline.apply_deletes import apply_deletes

    name = f"{namespace}.driver_upserts"
    identifier = f"{CATALOG}.{name}"
    merged_on_read(spark, identifier, batches=3)
    spark.sql(f"CALL {CATALOG}.system.rewrite_position_delete_files(table => '{name}')")
    catalog = catalog_server.pyiceberg_catalog()
    expected = read_rows(catalog, name)
    by_spark = sorted(map(tuple, spark.table(identifier).collect()))
    result = apply_deletes(catalog.load_table(name), indexes=None)
    assert result.delete_files >= 2 and result.snapshot_id is not None
    table = catalog.load_table(name)
    assert table.inspect.files()["content"].to_pylist().count(1) == 0
    assert read_rows(catalog, name) == expected
    spark.sql(f"REFRESH TABLE {identifier}")
    assert sorted(map(tuple, spark.table(identifier).collect())) == by_spark
    for rewritten in result.files:
        if rewritten.new is not None:
            assert rewritten.new.partition == rewritten.old.partition
