"""The object store failing under the catalog: nothing is published, the error names the
store and the table, the connection stays usable, and a retry commits exactly once.

The catalog's S3 endpoint (its own and the one it hands its clients) is the fault proxy.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.exceptions import ServiceUnavailableError
from pyiceberg.table import Table

from tests.fixtures.catalog import new_table
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.support.fault_proxy import Fault, FaultProxy

SCHEMA = pa.schema([("id", pa.int64())])
# pyarrow writes every file as a multipart upload: POST ?uploads, PUT ?partNumber, POST ?uploadId.
METADATA_FILE = r"\.metadata\.json$"


def _table(server: S3CatalogServer) -> Table:
    catalog = server.pyiceberg_catalog()
    table = new_table(catalog, "t", SCHEMA, "fault")
    table.append(pa.table({"id": [1]}, schema=SCHEMA))
    return catalog.load_table(table.name())


def _ids(server: S3CatalogServer, table: Table) -> list[int]:
    fresh = server.pyiceberg_catalog().load_table(table.name())
    return sorted(fresh.scan().to_arrow()["id"].to_pylist())


def test_metadata_write_refused_publishes_nothing(
    faulty_s3_catalog: tuple[S3CatalogServer, FaultProxy],
) -> None:
    server, proxy = faulty_s3_catalog
    table = _table(server)
    before = table.metadata_location
    proxy.add_fault(
        Fault(action="status", method="POST", path=METADATA_FILE, query="uploads", times=None)
    )
    try:
        with pytest.raises(ServiceUnavailableError) as failed:
            table.append(pa.table({"id": [2]}, schema=SCHEMA))
    finally:
        proxy.clear_faults()
    message = str(failed.value)
    assert server.warehouse in message and ".".join(table.name()) in message
    reloaded = server.pyiceberg_catalog().load_table(table.name())
    assert reloaded.metadata_location == before
    assert _ids(server, table) == [1]
    # The same client retries: exactly one new snapshot.
    reloaded.append(pa.table({"id": [2]}, schema=SCHEMA))
    assert _ids(server, table) == [1, 2]
    assert len(server.pyiceberg_catalog().load_table(table.name()).snapshots()) == 2


def test_lost_answer_to_the_metadata_write_is_retried_once(
    faulty_s3_catalog: tuple[S3CatalogServer, FaultProxy],
) -> None:
    """The store completes the metadata file's upload but the answer is lost: the S3
    client retries the completion, the store answers 200, and the table moves once."""
    server, proxy = faulty_s3_catalog
    table = _table(server)
    proxy.reset_requests()
    proxy.add_fault(
        Fault(action="reset-after", method="POST", path=METADATA_FILE, query="uploadId", times=1)
    )
    try:
        table.append(pa.table({"id": [2]}, schema=SCHEMA))
    finally:
        proxy.clear_faults()
    completes = [
        (r.status, r.fault)
        for r in proxy.requests
        if r.method == "POST" and "uploadId" in r.query and r.path.endswith(".metadata.json")
    ]
    assert completes == [(None, "reset-after"), (200, None)]
    assert _ids(server, table) == [1, 2]
    assert len(server.pyiceberg_catalog().load_table(table.name()).snapshots()) == 2


def test_store_keeps_failing_after_applying_the_write(
    faulty_s3_catalog: tuple[S3CatalogServer, FaultProxy],
) -> None:
    """Every answer to the completion is lost: the catalog gives up (503), the table does
    not move, and the metadata file the store kept is an orphan for remove_orphans."""
    server, proxy = faulty_s3_catalog
    table = _table(server)
    before = table.metadata_location
    proxy.reset_requests()
    proxy.add_fault(
        Fault(action="reset-after", method="POST", path=METADATA_FILE, query="uploadId", times=None)
    )
    try:
        with pytest.raises(ServiceUnavailableError):
            table.append(pa.table({"id": [2]}, schema=SCHEMA))
    finally:
        proxy.clear_faults()
    assert server.pyiceberg_catalog().load_table(table.name()).metadata_location == before
    assert _ids(server, table) == [1]
    hit = [r for r in proxy.requests if r.fault == "reset-after"]
    assert len(hit) >= 2  # the S3 client retried before the catalog gave up
    bucket, key = hit[0].path.lstrip("/").split("/", 1)
    assert server.s3.client().head_object(Bucket=bucket, Key=key)["ContentLength"] > 0


def test_data_file_upload_reset_fails_the_append(
    faulty_s3_catalog: tuple[S3CatalogServer, FaultProxy],
) -> None:
    server, proxy = faulty_s3_catalog
    table = _table(server)
    proxy.add_fault(Fault(action="reset", method="PUT", path=r"/data/.*\.parquet$", times=None))
    try:
        with pytest.raises(OSError):
            table.append(pa.table({"id": [2]}, schema=SCHEMA))
    finally:
        proxy.clear_faults()
    assert _ids(server, table) == [1]
