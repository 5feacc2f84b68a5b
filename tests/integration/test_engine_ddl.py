"""Table creation DDL: partition transforms, properties and sort order, read back by pyiceberg."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from tableflow_core.engine.ddl import SchemaEvolutionError, apply_schema_changes, create_table
from tableflow_core.engine.spark_session import register_catalog
from tableflow_core.ingest.terms import PartitionTerm, SortTerm
from tableflow_core.schemas.evolution import diff_schemas, iceberg_schema_for
from tableflow_core.sql_text import quote_ident
from tests.fixtures.catalog import CatalogServer, unique_namespace

CATALOG = "tf_ddl"

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("customer", pa.string()),
        pa.field("qty", pa.int32()),
        pa.field("point", pa.struct([pa.field("x", pa.float64())])),
        pa.field("_kafka_timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("_kafka_headers", pa.map_(pa.string(), pa.binary())),
    ]
)


def identifier(namespace: str) -> str:
    return f"{quote_ident(CATALOG)}.{quote_ident(namespace)}.`orders`"


def test_create_table_with_partitioning_properties_and_sort_order(
    spark: Any, catalog_server: CatalogServer
) -> None:
    register_catalog(spark, CATALOG, catalog_server.spark_properties())
    namespace = unique_namespace("ddl")
    create_table(
        spark,
        identifier(namespace),
        SCHEMA,
        partition_by=(
            PartitionTerm(column="_kafka_timestamp", transform="day"),
            PartitionTerm(column="id", transform="bucket", param=8),
            PartitionTerm(column="customer", transform="truncate", param=4),
        ),
        sort_by=(
            SortTerm(column="customer"),
            SortTerm(column="id", descending=True, nulls_first=False),
        ),
        properties={"write.target-file-size-bytes": "134217728"},
    )
    table = catalog_server.pyiceberg_catalog().load_table(f"{namespace}.orders")
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [
        ("_kafka_timestamp_day", "day"),
        ("id_bucket", "bucket[8]"),
        ("customer_trunc", "truncate[4]"),
    ]
    props = table.properties
    assert props["write.parquet.compression-codec"] == "zstd"
    assert props["write.target-file-size-bytes"] == "134217728"
    assert table.format_version == 2
    assert [str(f.direction) for f in table.sort_order().fields] == [
        "ASC",
        "DESC",
    ]
    assert table.schema().find_field("id").required

    # evolution: a new optional nested-free column and a widening, applied in place
    evolved = SCHEMA.set(2, pa.field("qty", pa.int64())).append(pa.field("note", pa.string()))
    diff = diff_schemas(iceberg_schema_for(SCHEMA), evolved)
    apply_schema_changes(spark, identifier(namespace), diff, evolved)
    table = catalog_server.pyiceberg_catalog().load_table(f"{namespace}.orders")
    assert str(table.schema().find_field("qty").field_type) == "long"
    assert table.schema().column_names[-1] == "note"

    # incompatible: string -> long is refused and nothing changes
    broken = evolved.set(1, pa.field("customer", pa.int64()))
    with pytest.raises(SchemaEvolutionError, match="customer"):
        apply_schema_changes(
            spark,
            identifier(namespace),
            diff_schemas(iceberg_schema_for(evolved), broken),
            broken,
            table_name="orders",
            topic="orders",
        )
    table = catalog_server.pyiceberg_catalog().load_table(f"{namespace}.orders")
    assert str(table.schema().find_field("customer").field_type) == "string"
