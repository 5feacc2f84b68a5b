"""Suspending a table through the real REST catalog: visible to any client, no new snapshot."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tableflow_core.deadletter.errors import SuspensionError
from tableflow_core.deadletter.suspension import (
    SUSPENDED_PROPERTY,
    Suspension,
    clear_suspension,
    current_suspension,
    describe_suspension,
    suspend,
)
from tests.fixtures.catalog import CatalogServer, new_namespace

pytestmark = pytest.mark.slow


def test_suspension_is_a_table_property_that_does_not_move_main(
    catalog_server: CatalogServer,
) -> None:
    catalog = catalog_server.pyiceberg_catalog()
    namespace = new_namespace(catalog, "susp")
    data = pa.table({"id": pa.array([1, 2], pa.int64())})
    table = catalog.create_table(f"{namespace}.orders", schema=data.schema)
    table.append(data)
    before = catalog.load_table(f"{namespace}.orders")
    snapshot, refs = before.metadata.current_snapshot_id, dict(before.metadata.refs)

    suspension = Suspension.now(
        "DecodingError: wrong magic byte 0x07", "orders-topic", 2, 1234, "run-7"
    )
    suspend(catalog, f"{namespace}.orders", suspension)

    # Another client (as `plan` on another machine) sees it.
    other = catalog_server.pyiceberg_catalog("another-client")
    seen = other.load_table(f"{namespace}.orders")
    assert seen.metadata.current_snapshot_id == snapshot
    assert dict(seen.metadata.refs) == refs
    assert current_suspension(other, f"{namespace}.orders") == suspension
    text = describe_suspension(seen.properties)
    assert text is not None and "partition 2 offset 1234" in text and "wrong magic" in text

    assert clear_suspension(catalog, f"{namespace}.orders") is True
    assert SUSPENDED_PROPERTY not in other.load_table(f"{namespace}.orders").properties
    assert clear_suspension(catalog, f"{namespace}.orders") is False

    with pytest.raises(SuspensionError, match=rf"{namespace}.missing: cannot load it"):
        suspend(catalog, f"{namespace}.missing", suspension)
