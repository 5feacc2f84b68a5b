"""Expiry keeps the files it frees for `keep_files_for`, then a later expiry deletes them
(maintenance/expired_files.py): real Spark + Iceberg runtime, the catalog server, files
on disk, a reader holding the expired snapshot read back with pyiceberg."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from tableflow_core.config.models.maintenance import ExpireSnapshotsSettings
from tableflow_core.maintenance.expired_files import PROPERTY
from tableflow_core.maintenance.operations import expire_snapshots
from tableflow_core.maintenance.target import SparkTable
from tests.fixtures.catalog import CatalogServer, unique_namespace

pytestmark = pytest.mark.slow


def local(uri: str) -> Path:
    return Path(urlparse(uri).path)


def three_appends_then_a_compaction(spark: Any, catalog: str, name: str) -> str:
    """A table whose first three snapshots' data files only those snapshots use, with a
    fourth append after the compaction (Iceberg frees the files a snapshot removed once
    that snapshot expires too)."""
    ns = unique_namespace("expired")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{ns}")
    table = f"{catalog}.{ns}.{name}"
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg")
    for start in (0, 10, 20):
        spark.range(start, start + 10).coalesce(1).writeTo(table).append()
    spark.sql(
        f"CALL {catalog}.system.rewrite_data_files(table => '{ns}.{name}', "
        "options => map('min-input-files', '1'))"
    )
    spark.range(30, 40).coalesce(1).writeTo(table).append()
    return table


def expire(spark: Any, table: str, at: datetime, keep_files_for: str = "10m") -> dict[str, Any]:
    """Every snapshot but the current one expired as of `at`."""
    settings = ExpireSnapshotsSettings(
        older_than="0s", retain_last=1, keep_files_for=keep_files_for
    )
    return expire_snapshots(spark, SparkTable.parse(table), settings, at)


def data_files_of(table: Any, snapshot_id: int) -> set[Path]:
    return {local(t.file.file_path) for t in table.scan(snapshot_id=snapshot_id).plan_files()}


@dataclass(frozen=True)
class Expiring:
    """A table about to expire its first snapshots, and a reader that loaded it before."""

    table: str  # Spark's name
    identifier: str  # the catalog's
    reader: Any
    first: int  # the first snapshot's id
    old_files: set[Path]  # its data files, which only the snapshots to expire use


def expiring(spark: Any, catalog: str, server: CatalogServer, name: str) -> Expiring:
    table = three_appends_then_a_compaction(spark, catalog, name)
    identifier = table.split(".", 1)[1]
    reader = server.pyiceberg_catalog().load_table(identifier)
    first = reader.history()[0].snapshot_id
    return Expiring(table, identifier, reader, first, data_files_of(reader, first))


def test_freed_files_outlive_the_expiry_by_keep_files_for_then_go(
    spark: Any, spark_catalog: str, catalog_server: CatalogServer
) -> None:
    t = expiring(spark, spark_catalog, catalog_server, "events")
    catalog = catalog_server.pyiceberg_catalog()
    assert len(t.old_files) == 1 and all(p.exists() for p in t.old_files)
    now = datetime.now(UTC)

    expired = expire(spark, t.table, now)
    assert expired["expired_snapshots"] == 4 and expired["snapshots_kept"] == 1
    assert expired["expired_files_kept"] >= 3 + 3  # data files and manifest lists at least
    assert expired["expired_files_deleted"] == 0
    loaded = catalog.load_table(t.identifier)
    assert len(loaded.metadata.snapshots) == 1
    (pending,) = json.loads(loaded.properties[PROPERTY])
    listed = local(pending["list"])
    assert listed.parent == local(loaded.metadata_location).parent and listed.exists()
    assert pending["after_ms"] == int(now.timestamp() * 1000) + 600_000
    assert {str(p) for p in t.old_files} <= {
        local(line).as_posix() for line in listed.read_text().split()
    }
    # The expired snapshot is gone from the metadata, its files are not: the reader reads it.
    read = t.reader.scan(snapshot_id=t.first).to_arrow()["id"].to_pylist()
    assert sorted(read) == list(range(10))

    # Five minutes on: nothing is due, nothing is deleted, no commit.
    later = expire(spark, t.table, now + timedelta(minutes=5))
    assert (later["expired_files_kept"], later["expired_files_deleted"]) == (0, 0)
    assert catalog.load_table(t.identifier).metadata_location == loaded.metadata_location
    assert all(p.exists() for p in t.old_files)

    # Past keep_files_for: the files and their list are deleted, the property is gone.
    gone = expire(spark, t.table, now + timedelta(minutes=11))
    assert gone["expired_files_deleted"] == expired["expired_files_kept"]
    assert not any(p.exists() for p in t.old_files) and not listed.exists()
    assert PROPERTY not in catalog.load_table(t.identifier).properties
    with pytest.raises(OSError):
        t.reader.scan(snapshot_id=t.first).to_arrow()
    current = catalog.load_table(t.identifier).scan().to_arrow()["id"].to_pylist()
    assert sorted(current) == list(range(40))


def test_keep_files_for_0s_deletes_them_with_the_expiry(
    spark: Any, spark_catalog: str, catalog_server: CatalogServer
) -> None:
    ready = expiring(spark, spark_catalog, catalog_server, "now")
    done = expire(spark, ready.table, datetime.now(UTC), keep_files_for="0s")
    assert done["expired_snapshots"] == 4 and done["expired_files_kept"] == 0
    assert not any(p.exists() for p in ready.old_files)
    loaded = catalog_server.pyiceberg_catalog().load_table(ready.identifier)
    assert PROPERTY not in loaded.properties


def test_a_list_naming_files_outside_the_table_deletes_none_of_them(
    spark: Any, spark_catalog: str, catalog_server: CatalogServer, tmp_path: Path
) -> None:
    """The lists are read back from storage: only the table's own files are ever deleted."""
    table = three_appends_then_a_compaction(spark, spark_catalog, "confined")
    identifier = table.split(".", 1)[1]
    loaded = catalog_server.pyiceberg_catalog().load_table(identifier)
    metadata_dir = local(loaded.metadata_location).parent
    outsider = tmp_path / "precious.txt"
    outsider.write_text("keep me")
    climbing = metadata_dir / ".." / ".." / "precious.txt"
    climbing.write_text("keep me too")
    listed = metadata_dir / "tableflow-expired-files-1-planted.txt"
    listed.write_text(f"file://{outsider}\nfile://{metadata_dir}/../../precious.txt\n")
    entries = [{"list": f"file://{listed}", "after_ms": 1}]
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('{PROPERTY}' = '{json.dumps(entries)}')")

    done = expire(spark, table, datetime.now(UTC), keep_files_for="0s")
    assert done["expired_files_outside_table"] == 2 and done["expired_files_deleted"] == 0
    assert outsider.read_text() == "keep me" and climbing.resolve().read_text() == "keep me too"
    assert not listed.exists()  # the list itself was the table's: done with
