"""The DDL of the schema fixes, run by Spark on the real catalog and read back by pyiceberg:
local timestamps become Iceberg `timestamp` (not `timestamptz`), and a column the topic's
schema dropped is kept (optional, marked), then restored when the field comes back."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from tableflow_core.engine.ddl import apply_schema_changes, create_table
from tableflow_core.engine.spark_session import register_catalog
from tableflow_core.schemas.evolution import diff_schemas
from tableflow_core.schemas.write_schema import KEPT_COLUMN_DOC, table_write_schema
from tableflow_core.sql_text import quote_ident
from tests.fixtures.catalog import CatalogServer, unique_namespace

pytestmark = pytest.mark.slow

CATALOG = "tf_schemas_ddl"
V1 = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("local", pa.timestamp("us")),
        pa.field("instant", pa.timestamp("us", tz="UTC")),
        pa.field("legacy", pa.string(), nullable=False),
        pa.field("s", pa.struct([("a", pa.int32()), ("gone", pa.timestamp("us"))])),
        pa.field("events", pa.list_(pa.field("element", pa.timestamp("us")))),
    ]
)
V2 = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("local", pa.timestamp("us")),
        pa.field("instant", pa.timestamp("us", tz="UTC")),
        pa.field("s", pa.struct([("a", pa.int32())])),
        pa.field("events", pa.list_(pa.field("element", pa.timestamp("us")))),
    ]
)


def identifier(namespace: str) -> str:
    return f"{quote_ident(CATALOG)}.{quote_ident(namespace)}.`t`"


def test_local_timestamps_and_kept_columns(spark: Any, catalog_server: CatalogServer) -> None:
    register_catalog(spark, CATALOG, catalog_server.spark_properties())
    namespace = unique_namespace("schddl")
    create_table(spark, identifier(namespace), V1)
    catalog = catalog_server.pyiceberg_catalog()
    table = catalog.load_table(f"{namespace}.t")
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert types["local"] == "timestamp" and types["instant"] == "timestamptz"
    assert types["events"] == "list<timestamp>"
    assert types["s"].endswith("gone: optional timestamp>")
    assert diff_schemas(table.schema(), V1).is_empty  # the plan converges after creation

    # v2 drops `legacy` (required) and `s.gone`: kept, optional, marked; plan converges
    diff = diff_schemas(table.schema(), V2)
    assert {(c.kind, c.path) for c in diff.changes} == {
        ("keep_column", "legacy"),
        ("keep_column", "s.gone"),
    }
    write = table_write_schema(V2, table.schema())
    apply_schema_changes(spark, identifier(namespace), diff, write)
    table = catalog.load_table(f"{namespace}.t")
    legacy = table.schema().find_field("legacy")
    assert not legacy.required and legacy.doc == KEPT_COLUMN_DOC
    assert table.schema().find_field("s.gone").doc == KEPT_COLUMN_DOC
    assert diff_schemas(table.schema(), V2).is_empty
    # rows written with the write schema carry every table column (nulls where kept)
    rows = pa.Table.from_pylist(
        [{"id": 1, "s": {"a": 2}}], schema=table_write_schema(V2, table.schema())
    )
    spark.createDataFrame(rows.to_pandas()).writeTo(f"{CATALOG}.{namespace}.t").append()
    assert spark.table(f"{CATALOG}.{namespace}.t").where("legacy IS NULL").count() == 1

    # v3 brings `legacy` back: the mark is cleared once, then the plan converges
    diff = diff_schemas(table.schema(), V1)
    assert [(c.kind, c.path) for c in diff.changes] == [
        ("restore_column", "legacy"),
        ("restore_column", "s.gone"),
    ]
    apply_schema_changes(spark, identifier(namespace), diff, V1)
    table = catalog.load_table(f"{namespace}.t")
    assert table.schema().find_field("legacy").doc != KEPT_COLUMN_DOC
    assert diff_schemas(table.schema(), V1).changes == ()
