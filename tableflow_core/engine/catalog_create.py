"""Creating a table through the in-process embedded catalog, as Spark's CREATE TABLE does.

A first apply of 1,000 tables spent about a quarter of its time in 1,000 Spark
`CREATE TABLE` statements: each one parsed by Spark, converted by Iceberg's Spark catalog
and sent as a REST request to the embedded catalog running in this very process. When
the catalog is in-process, apply hands the server's `CatalogService.create_table` the
request Spark would have sent instead: the table's columns converted the way Spark
converts the statement `engine/ddl.create_table_sql` writes (Arrow -> Spark SQL types ->
Iceberg types), the same properties plus the `owner` Spark adds. The server then does
exactly what it does for Spark's request (fresh field ids, format version, location,
metadata file). tests/integration/test_catalog_create.py holds both ways equal.

Only unpartitioned, unordered tables are created this way (the many small tables of a
large project); a partitioned or ordered table, or a type this module does not convert,
goes through Spark's DDL as before.
"""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from tableflow_core.engine.ddl import spark_schema_for
from tableflow_core.errors import TableflowError
from tableflow_core.ingest.spec import DEFAULT_TABLE_PROPERTIES

# The property Spark adds to every table it creates (CatalogV2Util.withDefaultOwnership).
OWNER_PROPERTY = "owner"


def spark_user() -> str:
    """The user name Spark's `owner` property gets (Utils.getCurrentUserName: $SPARK_USER,
    else Hadoop's current user: $HADOOP_USER_NAME, else the OS account)."""
    for variable in ("SPARK_USER", "HADOOP_USER_NAME"):
        if value := os.environ.get(variable):
            return value
    return pwd.getpwuid(os.getuid()).pw_name


class _Unconvertible(TableflowError, ValueError):
    """A Spark type this module does not convert: the table goes through Spark."""


class _Ids:
    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last += 1
        return self.last


def _iceberg_type(spark_type: Any, ids: _Ids) -> IcebergType:
    """Iceberg's SparkTypeToType for the types Spark SQL DDL gives: in `ARRAY<..>` and
    `MAP<.., ..>` the elements and values are nullable (the DDL cannot say otherwise);
    struct fields keep NOT NULL."""
    # pyspark is imported where used, as in engine/ddl.py.
    from pyspark.sql import types as spark

    primitives: dict[type, IcebergType] = {
        spark.BooleanType: BooleanType(),
        spark.ByteType: IntegerType(),
        spark.ShortType: IntegerType(),
        spark.IntegerType: IntegerType(),
        spark.LongType: LongType(),
        spark.FloatType: FloatType(),
        spark.DoubleType: DoubleType(),
        spark.StringType: StringType(),
        spark.BinaryType: BinaryType(),
        spark.DateType: DateType(),
        spark.TimestampType: TimestamptzType(),
        spark.TimestampNTZType: TimestampType(),
    }
    if type(spark_type) in primitives:
        return primitives[type(spark_type)]
    if isinstance(spark_type, spark.DecimalType):
        return DecimalType(spark_type.precision, spark_type.scale)
    if isinstance(spark_type, spark.StructType):
        field_ids = [ids.next() for _ in spark_type.fields]
        return StructType(
            *(
                NestedField(field_id, f.name, _iceberg_type(f.dataType, ids), not f.nullable)
                for field_id, f in zip(field_ids, spark_type.fields, strict=True)
            )
        )
    if isinstance(spark_type, spark.ArrayType):
        element_id = ids.next()
        element = _iceberg_type(spark_type.elementType, ids)
        return ListType(element_id, element, element_required=False)
    if isinstance(spark_type, spark.MapType):
        key_id, value_id = ids.next(), ids.next()
        key, value = (
            _iceberg_type(spark_type.keyType, ids),
            _iceberg_type(spark_type.valueType, ids),
        )
        return MapType(key_id, key, value_id, value, value_required=False)
    raise _Unconvertible(spark_type.simpleString())


def iceberg_schema_as_spark_creates(arrow_schema: pa.Schema) -> Schema | None:
    """The schema Spark's CREATE TABLE of `arrow_schema` sends (field ids as the server
    assigns them afresh anyway); None when a type is not one this module converts."""
    try:
        struct = _iceberg_type(spark_schema_for(arrow_schema), _Ids())
    except _Unconvertible:
        return None
    assert isinstance(struct, StructType)
    return Schema(*struct.fields)


def create_request(name: str, schema: Schema, properties: Mapping[str, str] | None) -> Any:
    """The CreateTableBody Spark's `CREATE TABLE .. TBLPROPERTIES (..)` sends, parsed the
    way the server parses a request."""
    from tableflow_core.catalog.models import CreateTableBody

    wanted = {**DEFAULT_TABLE_PROPERTIES, **(properties or {}), OWNER_PROPERTY: spark_user()}
    body = {"name": name, "schema": json.loads(schema.model_dump_json()), "properties": wanted}
    return CreateTableBody.model_validate_json(json.dumps(body))


def create_table_in_process(
    service: Any,
    identifier: tuple[str, ...],
    arrow_schema: pa.Schema,
    properties: Mapping[str, str] | None,
) -> bool:
    """Create the unpartitioned, unordered table `identifier` through `service` (the
    in-process embedded catalog's CatalogService); False, creating nothing, when its
    columns have a type left to Spark."""
    schema = iceberg_schema_as_spark_creates(arrow_schema)
    if schema is None:
        return False
    service.create_table(identifier[:-1], create_request(identifier[-1], schema, properties))
    return True
