"""A table created through the in-process catalog (engine/catalog_create.py) is the table
Spark's CREATE TABLE makes: same schema (field ids, types, nullability), spec, sort order,
format version and properties; and both read the same rows after the same writes."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from tableflow_core.catalog import CatalogServerSettings, serve_in_background
from tableflow_core.engine import ddl
from tableflow_core.engine.catalog_create import (
    OWNER_PROPERTY,
    create_namespace_as_spark_does,
    create_table_as_spark_does,
    create_table_in_process,
    creates_as_spark_does,
    iceberg_schema_as_spark_creates,
)
from tableflow_core.engine.spark_session import register_catalog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Every type a topic's schema resolves to, nested ones with nullable and required parts.
WIDE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("flag", pa.bool_()),
        pa.field("tiny", pa.int8()),
        pa.field("small", pa.int16()),
        pa.field("n", pa.int32()),
        pa.field("f", pa.float32()),
        pa.field("d", pa.float64()),
        pa.field("price", pa.decimal128(12, 3)),
        pa.field("name", pa.string()),
        pa.field("big_name", pa.large_string()),
        pa.field("blob", pa.binary()),
        pa.field("day", pa.date32()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("local_at", pa.timestamp("us")),
        pa.field("tags", pa.list_(pa.field("item", pa.string(), nullable=False))),
        pa.field("attrs", pa.map_(pa.string(), pa.int64())),
        pa.field(
            "address",
            pa.struct(
                [
                    pa.field("street", pa.string(), nullable=False),
                    pa.field("zip", pa.int32()),
                    pa.field("geo", pa.struct([pa.field("lat", pa.float64())])),
                ]
            ),
        ),
        pa.field("events", pa.list_(pa.struct([pa.field("kind", pa.string())]))),
    ]
)
# One row of WIDE, as Spark takes it.
ROW = (
    1, True, 1, 2, 3, 1.5, 2.5, decimal.Decimal("12.345"), "a", "b", b"\x00",
    dt.date(2026, 11, 26), dt.datetime(2026, 11, 26, 10, tzinfo=dt.UTC),
    dt.datetime(2026, 11, 26, 11), ["x"], {"k": 7}, ("main", 12345, (1.25,)),
    [("click",)],
)  # fmt: skip
PROPERTIES = {"tableflow.mode": "append", "tableflow.topic": "wide", "custom.key": "v"}


def _metadata_shape(table: object) -> dict[str, object]:
    metadata = table.metadata  # type: ignore[attr-defined]
    return {
        "format_version": metadata.format_version,
        "schemas": [s.model_dump() for s in metadata.schemas],
        "current_schema_id": metadata.current_schema_id,
        "last_column_id": metadata.last_column_id,
        "partition_specs": [s.model_dump() for s in metadata.partition_specs],
        "last_partition_id": metadata.last_partition_id,
        "sort_orders": [s.model_dump() for s in metadata.sort_orders],
        "properties": metadata.properties,
    }


def test_created_in_process_equals_spark_create_table(spark: SparkSession, tmp_path: Path) -> None:
    settings = CatalogServerSettings(warehouse=tmp_path / "wh", auth="none", access_log=False)
    with serve_in_background(settings) as server:
        register_catalog(spark, "cc", server.spark_properties())
        spark.sql("CREATE NAMESPACE IF NOT EXISTS cc.n")
        ddl.create_table(spark, "cc.n.t_spark", WIDE, properties=PROPERTIES, with_namespace=False)
        assert create_table_in_process(server.service, ("n", "t_direct"), WIDE, PROPERTIES)

        catalog = load_catalog("check", **server.pyiceberg_properties())
        by_spark, direct = (
            catalog.load_table(("n", "t_spark")),
            catalog.load_table(("n", "t_direct")),
        )
        assert _metadata_shape(direct) == _metadata_shape(by_spark)
        assert direct.metadata.properties[OWNER_PROPERTY]  # Spark's owner, the same user

        # The same rows written by Spark into each read back the same (Spark, pyiceberg).
        rows = spark.createDataFrame([ROW], spark.table("cc.n.t_spark").schema)
        for name in ("t_spark", "t_direct"):
            rows.writeTo(f"cc.n.{name}").append()
        spark_rows = [
            sorted(map(str, spark.table(f"cc.n.{name}").collect()))
            for name in ("t_spark", "t_direct")
        ]
        assert spark_rows[0] == spark_rows[1] and len(spark_rows[0]) == 1
        arrow = [catalog.load_table(("n", n)).scan().to_arrow() for n in ("t_spark", "t_direct")]
        assert arrow[0].schema == arrow[1].schema
        assert arrow[0].to_pylist() == arrow[1].to_pylist()


def test_created_through_rest_equals_spark_create_table(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Through pyiceberg's REST client over HTTP (a catalog in another process as far as
    the client knows), the namespace and the table are those Spark's CREATE NAMESPACE IF
    NOT EXISTS and CREATE TABLE make: same metadata, same namespace properties."""
    settings = CatalogServerSettings(warehouse=tmp_path / "wh", auth="none", access_log=False)
    with serve_in_background(settings) as server:
        register_catalog(spark, "cr", server.spark_properties())
        catalog = load_catalog("direct", **server.pyiceberg_properties())
        assert creates_as_spark_does(catalog, server.spark_properties())

        spark.sql("CREATE NAMESPACE IF NOT EXISTS cr.by_spark")
        ddl.create_table(spark, "cr.by_spark.t", WIDE, properties=PROPERTIES, with_namespace=False)
        create_namespace_as_spark_does(catalog, ("direct",))
        create_namespace_as_spark_does(catalog, ("direct",))  # exists: left as it is
        assert create_table_as_spark_does(catalog, ("direct", "t"), WIDE, PROPERTIES)

        by_spark, direct = (
            catalog.load_table(("by_spark", "t")),
            catalog.load_table(("direct", "t")),
        )
        assert _metadata_shape(direct) == _metadata_shape(by_spark)
        namespace_properties = [
            {k: v for k, v in catalog.load_namespace_properties((ns,)).items() if k != "location"}
            for ns in ("by_spark", "direct")
        ]
        assert namespace_properties[0] == namespace_properties[1]
        assert namespace_properties[1][OWNER_PROPERTY]

        # Spark writes into the table created without it and both read it back.
        spark.createDataFrame([ROW], spark.table("cr.by_spark.t").schema).writeTo(
            "cr.direct.t"
        ).append()
        assert spark.table("cr.direct.t").count() == 1
        assert len(catalog.load_table(("direct", "t")).scan().to_arrow()) == 1


def test_only_rest_catalogs_without_client_table_properties_create_without_spark(
    tmp_path: Path,
) -> None:
    """Iceberg's Java client merges `table-default.*` / `table-override.*` catalog
    properties into its create request (pyiceberg does not): such a catalog, or one that
    Spark does not reach as a REST catalog, keeps Spark's CREATE TABLE."""
    settings = CatalogServerSettings(warehouse=tmp_path / "wh", auth="none", access_log=False)
    with serve_in_background(settings) as server:
        catalog = load_catalog("direct", **server.pyiceberg_properties())
        spark_properties = server.spark_properties()
        assert creates_as_spark_does(catalog, spark_properties)
        assert not creates_as_spark_does(
            catalog, {**spark_properties, "table-default.write.target-file-size-bytes": "1"}
        )
        assert not creates_as_spark_does(catalog, {**spark_properties, "type": "hive"})
        with_defaults = load_catalog(
            "direct", **server.pyiceberg_properties(), **{"table-override.owner": "x"}
        )
        assert not creates_as_spark_does(with_defaults, spark_properties)
        assert not creates_as_spark_does(object(), spark_properties)


def test_types_left_to_spark_are_not_created() -> None:
    """A column type the module does not convert: nothing is created, Spark's DDL runs."""
    duration = pa.schema([pa.field("took", pa.duration("us"))])
    assert iceberg_schema_as_spark_creates(duration) is None

    class NoService:
        def create_table(self, *_: object) -> None:
            pytest.fail("created a table whose type is left to Spark")

    assert not create_table_in_process(NoService(), ("n", "t"), duration, {})
