"""pyiceberg's RestCatalog against the real server: round trips and concurrent writers."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.types import StringType

from tests.fixtures.catalog import CatalogServer, new_namespace, unique_namespace

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("writer", pa.string())])


def test_create_append_evolve_and_read_back(catalog_server: CatalogServer) -> None:
    ns = unique_namespace()
    catalog = catalog_server.pyiceberg_catalog()
    catalog.create_namespace(ns, {"owner": "tests"})
    table = catalog.create_table((ns, "events"), SCHEMA)
    table.append(
        pa.table({"id": [1, 2], "writer": ["a", "a"]}, schema=SCHEMA),
        snapshot_properties={"k": "v"},
    )

    with table.update_schema() as update:
        update.add_column("note", StringType())
    evolved = pa.schema([*SCHEMA, pa.field("note", pa.string())])
    table.append(pa.table({"id": [3], "writer": ["b"], "note": ["hi"]}, schema=evolved))

    # A second, independent client sees everything through the server.
    reread = catalog_server.pyiceberg_catalog("other").load_table((ns, "events"))
    rows = sorted(reread.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "writer": "a", "note": None},
        {"id": 2, "writer": "a", "note": None},
        {"id": 3, "writer": "b", "note": "hi"},
    ]
    assert [f.name for f in reread.schema().fields] == ["id", "writer", "note"]
    assert reread.snapshots()[0].summary is not None and reread.snapshots()[0].summary["k"] == "v"
    assert reread.metadata_location.startswith(catalog_server.warehouse.resolve().as_uri())


def test_stale_writer_gets_commit_failed_and_its_retry_succeeds(
    catalog_server: CatalogServer,
) -> None:
    catalog = catalog_server.pyiceberg_catalog()
    ns = new_namespace(catalog)
    catalog.create_table((ns, "t"), SCHEMA, properties={"commit.retry.num-retries": "0"})
    first = catalog.load_table((ns, "t"))
    second = catalog_server.pyiceberg_catalog("second").load_table((ns, "t"))

    first.append(pa.table({"id": [1], "writer": ["first"]}, schema=SCHEMA))
    with pytest.raises(CommitFailedException):
        second.append(pa.table({"id": [2], "writer": ["second"]}, schema=SCHEMA))
    second.refresh()
    second.append(pa.table({"id": [2], "writer": ["second"]}, schema=SCHEMA))

    ids = sorted(catalog.load_table((ns, "t")).scan().to_arrow()["id"].to_pylist())
    assert ids == [1, 2]


def test_concurrent_appenders_lose_no_commit(catalog_server: CatalogServer) -> None:
    writers, appends_each = 4, 5
    catalog = catalog_server.pyiceberg_catalog()
    ns = new_namespace(catalog)
    # pyiceberg retries a commit that got 409; give it room for 4 racing writers.
    properties = {
        "commit.retry.num-retries": "50",
        "commit.retry.min-wait-ms": "5",
        "commit.retry.max-wait-ms": "200",
    }
    catalog.create_table((ns, "t"), SCHEMA, properties=properties)
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def append_rows(writer: int) -> None:
        try:
            table = catalog_server.pyiceberg_catalog(f"writer{writer}").load_table((ns, "t"))
            start.wait()
            for i in range(appends_each):
                rows = pa.table({"id": [writer * 100 + i], "writer": [f"w{writer}"]}, schema=SCHEMA)
                table.append(rows)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=append_rows, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors

    table = catalog.load_table((ns, "t"))
    ids = sorted(table.scan().to_arrow()["id"].to_pylist())
    assert ids == sorted(w * 100 + i for w in range(writers) for i in range(appends_each))
    assert len(table.snapshots()) == writers * appends_each
