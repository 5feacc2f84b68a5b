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

On any other REST catalog (an external server: Nessie, Polaris, a `tableflow catalog
serve`), apply sends that same request with pyiceberg's REST client of the target
(`create_table_as_spark_does`), and creates a missing namespace as Spark's
`CREATE NAMESPACE IF NOT EXISTS` does (`create_namespace_as_spark_does`): neither needs
the Spark application, so a first apply creates its tables while the JVM starts instead
of after it (the peer benchmark's 1M-record apply: Spark's CREATE TABLE took 0.4-1.5 s
once the JVM was ready, the first on a fresh catalog server the longest;
docs/history/performance-issues-26-31.md, "DDL while the JVM starts"). Both clients are REST clients of the
same endpoint with the same properties; when the catalog's properties carry
`table-default.*` or `table-override.*` (which Iceberg's Java client merges into its
create request and pyiceberg's does not), the table goes through Spark.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyiceberg import types as iceberg
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchNamespaceError
from pyiceberg.schema import Schema

from tableflow_core.engine.ddl import spark_schema_for
from tableflow_core.errors import TableflowError
from tableflow_core.ingest.spec import DEFAULT_TABLE_PROPERTIES

# The property Spark adds to every table it creates (CatalogV2Util.withDefaultOwnership)
# and to every namespace (CreateNamespaceExec).
OWNER_PROPERTY = "owner"
# Catalog properties Iceberg's Java client (Spark's) merges into a new table's properties.
CLIENT_TABLE_PROPERTY_PREFIXES = ("table-default.", "table-override.")


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


def _iceberg_type(spark_type: Any, ids: _Ids) -> iceberg.IcebergType:
    """Iceberg's SparkTypeToType for the types Spark SQL DDL gives: in `ARRAY<..>` and
    `MAP<.., ..>` the elements and values are nullable (the DDL cannot say otherwise);
    struct fields keep NOT NULL."""
    # pyspark is imported where used, as in engine/ddl.py.
    from pyspark.sql import types as spark

    primitives: dict[type, iceberg.IcebergType] = {
        spark.BooleanType: iceberg.BooleanType(),
        spark.ByteType: iceberg.IntegerType(),
        spark.ShortType: iceberg.IntegerType(),
        spark.IntegerType: iceberg.IntegerType(),
        spark.LongType: iceberg.LongType(),
        spark.FloatType: iceberg.FloatType(),
        spark.DoubleType: iceberg.DoubleType(),
        spark.StringType: iceberg.StringType(),
        spark.BinaryType: iceberg.BinaryType(),
        spark.DateType: iceberg.DateType(),
        spark.TimestampType: iceberg.TimestamptzType(),
        spark.TimestampNTZType: iceberg.TimestampType(),
    }
    if type(spark_type) in primitives:
        return primitives[type(spark_type)]
    if isinstance(spark_type, spark.DecimalType):
        return iceberg.DecimalType(spark_type.precision, spark_type.scale)
    if isinstance(spark_type, spark.StructType):
        field_ids = [ids.next() for _ in spark_type.fields]
        return iceberg.StructType(
            *(
                iceberg.NestedField(
                    field_id, f.name, _iceberg_type(f.dataType, ids), not f.nullable
                )
                for field_id, f in zip(field_ids, spark_type.fields, strict=True)
            )
        )
    if isinstance(spark_type, spark.ArrayType):
        element_id = ids.next()
        element = _iceberg_type(spark_type.elementType, ids)
        return iceberg.ListType(element_id, element, element_required=False)
    if isinstance(spark_type, spark.MapType):
        key_id, value_id = ids.next(), ids.next()
        key, value = (
            _iceberg_type(spark_type.keyType, ids),
            _iceberg_type(spark_type.valueType, ids),
        )
        return iceberg.MapType(key_id, key, value_id, value, value_required=False)
    raise _Unconvertible(spark_type.simpleString())


def iceberg_schema_as_spark_creates(arrow_schema: pa.Schema) -> Schema | None:
    """The schema Spark's CREATE TABLE of `arrow_schema` sends (field ids as the server
    assigns them afresh anyway); None when a type is not one this module converts."""
    try:
        struct = _iceberg_type(spark_schema_for(arrow_schema), _Ids())
    except _Unconvertible:
        return None
    assert isinstance(struct, iceberg.StructType)
    return Schema(*struct.fields)


def spark_create_properties(properties: Mapping[str, str] | None) -> dict[str, str]:
    """The properties Spark's `CREATE TABLE .. TBLPROPERTIES (..)` of engine/ddl.py sends."""
    return {**DEFAULT_TABLE_PROPERTIES, **(properties or {}), OWNER_PROPERTY: spark_user()}


def create_request(name: str, schema: Schema, properties: Mapping[str, str] | None) -> Any:
    """The CreateTableBody Spark's `CREATE TABLE .. TBLPROPERTIES (..)` sends, parsed the
    way the server parses a request."""
    from tableflow_core.catalog.models import CreateTableBody

    wanted = spark_create_properties(properties)
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


def creates_as_spark_does(catalog: Any, spark_properties: Mapping[str, str]) -> bool:
    """Whether `catalog` (the target's pyiceberg catalog) sends the namespace and table
    creations Spark's catalog of `spark_properties` sends: both REST clients (of the same
    endpoint, the target's), and no `table-default.*` / `table-override.*` property on
    either side (the server's config answer included, which pyiceberg merges into
    `catalog.properties`)."""
    if not isinstance(catalog, RestCatalog) or spark_properties.get("type") != "rest":
        return False
    keys = (*catalog.properties, *spark_properties)
    return not any(key.startswith(CLIENT_TABLE_PROPERTY_PREFIXES) for key in keys)


def create_namespace_as_spark_does(catalog: Any, namespace: tuple[str, ...]) -> None:
    """`CREATE NAMESPACE IF NOT EXISTS` as Spark runs it on an Iceberg REST catalog: the
    namespace is looked up, and only when missing created with Spark's `owner`
    property (one that appeared meanwhile is left as it is)."""
    try:
        catalog.load_namespace_properties(namespace)
        return
    except NoSuchNamespaceError:
        pass
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(namespace, {OWNER_PROPERTY: spark_user()})


def create_table_as_spark_does(
    catalog: Any,
    identifier: tuple[str, ...],
    arrow_schema: pa.Schema,
    properties: Mapping[str, str] | None,
) -> bool:
    """Create the unpartitioned, unordered table `identifier` with pyiceberg's REST client
    `catalog`, sending the request Spark's CREATE TABLE sends (its schema, no partition
    spec or sort order, its properties); False, creating nothing, when its columns have a
    type left to Spark. Only for a catalog `creates_as_spark_does` accepts."""
    schema = iceberg_schema_as_spark_creates(arrow_schema)
    if schema is None:
        return False
    catalog.create_table(identifier, schema, properties=spark_create_properties(properties))
    return True
