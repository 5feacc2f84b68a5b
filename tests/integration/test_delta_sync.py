"""Delta log over an Iceberg table's files (pyiceberg-written tables, real REST catalog).

Every step reads the table three ways and compares: pyiceberg (Iceberg), deltalake
(delta-rs) and DuckDB's delta extension.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType, UUIDType

from tableflow_core.delta import (
    APP_ID,
    DeltaSyncError,
    mirrored_snapshot_id,
    sync_delta_log,
)
from tableflow_core.delta.files import normalize_location
from tableflow_core.readers.duckdb_reader import extension_path
from tests.fixtures.catalog import CatalogServer, new_table

pytestmark = pytest.mark.slow

UTC = datetime.UTC


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["id"])


def iceberg_rows(table: Any) -> list[dict[str, Any]]:
    return _sorted(table.scan().to_arrow().to_pylist())


def deltalake_rows(location: str, options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    table = DeltaTable(normalize_location(location), storage_options=options)
    return _sorted(pa.table(table.to_pyarrow_table()).to_pylist())


def duckdb_rows(location: str, options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """DuckDB's delta_scan; `options` (deltalake's, for S3) become an S3 secret."""
    import duckdb

    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    con.execute("SET TimeZone = 'UTC'")
    if options:
        con.execute(f"LOAD '{extension_path('duckdb_extension_httpfs', 'httpfs')}'")
        endpoint = options["AWS_ENDPOINT_URL"]
        con.execute(
            "CREATE SECRET store (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, "
            "URL_STYLE 'path', USE_SSL ?)",
            [
                options["AWS_ACCESS_KEY_ID"],
                options["AWS_SECRET_ACCESS_KEY"],
                options.get("AWS_REGION", "us-east-1"),
                endpoint.split("://", 1)[1],
                endpoint.startswith("https://"),
            ],
        )
    con.execute(f"LOAD '{extension_path('duckdb_extension_delta', 'delta')}'")
    result = con.execute("SELECT * FROM delta_scan(?)", [normalize_location(location)])
    names = [d[0] for d in result.description]
    return _sorted([dict(zip(names, row, strict=True)) for row in result.fetchall()])


def duckdb_ids_where(location: str, where: str) -> list[int]:
    """A filtered scan: the Delta stats written from Iceberg's bounds must not skip a match."""
    import duckdb

    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    con.execute(f"LOAD '{extension_path('duckdb_extension_delta', 'delta')}'")
    query = f"SELECT id FROM delta_scan(?) WHERE {where} ORDER BY id"
    return [row[0] for row in con.execute(query, [normalize_location(location)]).fetchall()]


def assert_same_rows(table: Any) -> list[dict[str, Any]]:
    """The three readers agree; returns the rows."""
    expected = iceberg_rows(table)
    location = table.metadata.location
    assert deltalake_rows(location) == expected
    assert duckdb_rows(location) == expected
    return expected


def delta_version(location: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(normalize_location(location)).version()


def _batch(ids: range, with_note: bool = False) -> pa.Table:
    columns: dict[str, Any] = {
        "id": pa.array(list(ids), pa.int64()),
        "name": pa.array([f"n{i}" for i in ids], pa.large_string()),
        "ts": pa.array(
            [datetime.datetime(2024, 1, 1 + i % 3, tzinfo=UTC) for i in ids],
            pa.timestamp("us", tz="UTC"),
        ),
    }
    if with_note:
        columns["note"] = pa.array([f"note{i}" for i in ids], pa.large_string())
    return pa.table(columns)


SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "ts", TimestamptzType(), required=False),
)


def test_appends_schema_evolution_and_overwrite_read_the_same_as_delta(
    catalog_server: CatalogServer,
) -> None:
    catalog = catalog_server.pyiceberg_catalog()
    table = new_table(catalog, "events", SCHEMA, "delta")
    table.append(_batch(range(0, 5)))

    first = sync_delta_log(table)
    assert first.created and first.committed and first.files_added == 1
    assert first.snapshot_id == table.current_snapshot().snapshot_id
    assert Path(normalize_location(table.metadata.location), "_delta_log").is_dir()
    assert len(assert_same_rows(table)) == 5

    # Nothing changed: no new version.
    again = sync_delta_log(table)
    assert not again.committed and again.version == first.version

    table.append(_batch(range(5, 8)))
    second = sync_delta_log(table)
    assert (second.files_added, second.files_removed, second.version) == (1, 0, first.version + 1)
    assert len(assert_same_rows(table)) == 8
    location = table.metadata.location
    assert duckdb_ids_where(location, "id >= 4 AND id <= 6") == [4, 5, 6]
    assert duckdb_ids_where(location, "name IS NULL") == []

    # Schema evolution: the older files lack `note`, every reader sees null there.
    with table.update_schema() as update:
        update.add_column("note", StringType())
    table.append(_batch(range(8, 10), with_note=True))
    evolved = sync_delta_log(table)
    assert evolved.columns_added == ("note",) and evolved.files_added == 1
    rows = assert_same_rows(table)
    assert [r["note"] for r in rows] == [None] * 8 + ["note8", "note9"]

    # pyiceberg's delete rewrites files (copy-on-write): Delta gets remove + add actions.
    table.delete("id < 3")
    rewritten = sync_delta_log(table)
    assert rewritten.files_removed >= 1
    assert [r["id"] for r in assert_same_rows(table)] == list(range(3, 10))

    from deltalake import DeltaTable

    delta = DeltaTable(normalize_location(table.metadata.location))
    assert delta.transaction_version(APP_ID) == table.current_snapshot().sequence_number
    assert mirrored_snapshot_id(table.metadata.location) == table.current_snapshot().snapshot_id
    assert not sync_delta_log(table).committed


def test_empty_table_gets_an_empty_delta_table(catalog_server: CatalogServer) -> None:
    catalog = catalog_server.pyiceberg_catalog()
    table = new_table(catalog, "empty", SCHEMA, "delta")
    result = sync_delta_log(table)
    assert result.created and result.snapshot_id is None
    assert deltalake_rows(table.metadata.location) == []
    assert duckdb_rows(table.metadata.location) == []


def test_renamed_column_is_refused_and_nothing_is_written(catalog_server: CatalogServer) -> None:
    catalog = catalog_server.pyiceberg_catalog()
    table = new_table(catalog, "renamed", SCHEMA, "delta")
    table.append(_batch(range(0, 3)))
    sync_delta_log(table)
    version = delta_version(table.metadata.location)
    with table.update_schema() as update:
        update.rename_column("name", "label")
    with pytest.raises(DeltaSyncError, match="'label' was renamed from 'name'"):
        sync_delta_log(table)
    assert delta_version(table.metadata.location) == version


def test_unsupported_type_is_refused_with_the_column(catalog_server: CatalogServer) -> None:
    catalog = catalog_server.pyiceberg_catalog()
    table = new_table(
        catalog,
        "uuids",
        Schema(NestedField(1, "id", LongType()), NestedField(2, "u", UUIDType())),
        "delta",
    )
    with pytest.raises(DeltaSyncError, match="u: uuid"):
        sync_delta_log(table)
    assert not Path(normalize_location(table.metadata.location), "_delta_log").exists()


def test_a_concurrent_delta_commit_fails_the_sync_and_the_next_sync_repairs(
    catalog_server: CatalogServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deltalake import DeltaTable

    catalog = catalog_server.pyiceberg_catalog()
    table = new_table(catalog, "raced", SCHEMA, "delta")
    table.append(_batch(range(0, 3)))
    sync_delta_log(table)
    table.append(_batch(range(3, 6)))
    root = normalize_location(table.metadata.location)
    original = DeltaTable.create_write_transaction

    def racing(self: DeltaTable, *args: Any, **kwargs: Any) -> None:
        # Another sync commits between our read of the log and our commit.
        from deltalake import CommitProperties
        from deltalake.transaction import Transaction

        other = DeltaTable(root)
        original(
            other,
            [],
            "append",
            other.schema(),
            commit_properties=CommitProperties(app_transactions=[Transaction(APP_ID, 99)]),
        )
        original(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", racing)
    with pytest.raises(DeltaSyncError, match="changed while syncing"):
        sync_delta_log(table)
    monkeypatch.setattr(DeltaTable, "create_write_transaction", original)
    assert sync_delta_log(table).files_added == 1
    assert len(assert_same_rows(table)) == 6


def test_rollback_and_a_snapshot_without_file_changes(catalog_server: CatalogServer) -> None:
    catalog = catalog_server.pyiceberg_catalog()
    table = new_table(catalog, "rolled", SCHEMA, "delta")
    table.append(_batch(range(0, 3)))
    first_snapshot = table.current_snapshot().snapshot_id
    table.append(_batch(range(3, 6)))
    sync_delta_log(table)
    assert len(assert_same_rows(table)) == 6

    # Back to the first snapshot: its later file disappears from the Delta table too.
    table.manage_snapshots().set_current_snapshot(first_snapshot).commit()
    rolled = sync_delta_log(table)
    assert (rolled.files_added, rolled.files_removed) == (0, 1)
    assert [r["id"] for r in assert_same_rows(table)] == [0, 1, 2]
    assert mirrored_snapshot_id(table.metadata.location) == first_snapshot

    # A commit without files (like an offsets-only ingest commit): an empty Delta version
    # records the new snapshot; the next sync then reads nothing and writes nothing.
    table.append(_batch(range(0, 0)), snapshot_properties={"tableflow.offsets": "{}"})
    version = delta_version(table.metadata.location)
    moved = sync_delta_log(table)
    assert moved.committed and moved.version == version + 1
    assert (moved.files_added, moved.files_removed) == (0, 0)
    assert mirrored_snapshot_id(table.metadata.location) == table.current_snapshot().snapshot_id
    assert not sync_delta_log(table).committed
    assert [r["id"] for r in assert_same_rows(table)] == [0, 1, 2]
