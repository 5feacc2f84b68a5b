"""A kill -9 of the driver's rewrite of an upsert table's deletes (pipeline/apply_deletes.py)
right before and right after its commit, on the session's catalog server: the table is
exact either way (pyiceberg and DuckDB equal the model), and the next rewrite finishes.
And the same rewrite on an S3 warehouse (the table's FileIO, vended credentials)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from tableflow_core.engine.test_hooks import CRASH_ENV
from tableflow_core.pipeline.apply_deletes import (
    CRASH_AFTER_COMMIT,
    CRASH_BEFORE_COMMIT,
    apply_deletes,
)
from tests.fixtures.catalog import CatalogServer, new_namespace
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.unit.test_apply_deletes import duckdb_rows, history
from tests.unit.test_upsert_rows import Upserts, model

pytestmark = pytest.mark.slow  # needs the catalog server

# The child: maintain's operation on the table (crash points included), nothing else.
CHILD = """
import sys
from pyiceberg.catalog import load_catalog
from tableflow_core.pipeline.apply_deletes import driver_operation
from tableflow_core.catalog.clients import pyiceberg_catalog_properties
uri, credential, namespace = sys.argv[1:]
catalog = load_catalog("tableflow", **pyiceberg_catalog_properties(uri, credential))
print(driver_operation(catalog, (namespace, "t"))(None, None, None, None))
"""


def crashed_rewrite(server: CatalogServer, namespace: str, point: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, server.uri, server.credential, namespace],
        env={**os.environ, CRASH_ENV: point},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]


@pytest.mark.parametrize("point", [CRASH_BEFORE_COMMIT, CRASH_AFTER_COMMIT])
def test_a_kill_at_the_rewrite_s_commit_leaves_the_table_exact(
    catalog_server: CatalogServer, point: str
) -> None:
    catalog = catalog_server.pyiceberg_catalog()
    namespace = new_namespace(catalog, "ad")
    upserts = Upserts(catalog, namespace)
    done, records = upserts.apply_in_batches(history(3, 900, 150), (300, 300))
    before = upserts.table().metadata.current_snapshot()
    crashed_rewrite(catalog_server, namespace, point)
    table: Any = upserts.table()
    after = table.metadata.current_snapshot()
    if point == CRASH_BEFORE_COMMIT:
        assert after.snapshot_id == before.snapshot_id
        assert int(after.summary["total-delete-files"]) > 0
    else:
        assert after.summary.operation.value == "replace"
        assert after.parent_snapshot_id == before.snapshot_id
        assert after.summary["total-delete-files"] == "0"
    assert upserts.rows() == model(done) == duckdb_rows(table)
    # Batches and rewrites go on from there.
    batch = records[:300]
    upserts.apply(batch)
    done += batch
    apply_deletes(upserts.table(), indexes=None)
    assert upserts.table().metadata.current_snapshot().summary["total-delete-files"] == "0"
    assert upserts.rows() == model(done) == duckdb_rows(upserts.table())


def test_deletes_are_applied_on_object_storage(s3_catalog: S3CatalogServer) -> None:
    """The same rewrite on an S3 warehouse (the catalog's vended credentials, the table's
    FileIO): new files under s3://, the rows the model's, no delete file left."""
    catalog = s3_catalog.pyiceberg_catalog()
    namespace = new_namespace(catalog, "ads3")
    upserts = Upserts(catalog, namespace)
    done, _ = upserts.apply_in_batches(history(9, 600, 100), (300, 300))
    result = apply_deletes(upserts.table(), indexes=None)
    assert result.files and all(
        f.new.file_path.startswith("s3://") for f in result.files if f.new is not None
    )
    table = upserts.table()
    assert table.metadata.current_snapshot().summary["total-delete-files"] == "0"
    assert upserts.rows() == model(done)
