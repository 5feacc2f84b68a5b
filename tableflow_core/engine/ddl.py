"""Creating, altering and dropping Iceberg tables with Spark SQL DDL.

Every function takes the table's Spark identifier (quoted: `cat`.`ns`.`table`) and what
the plan's action says; apply's DDL actions (runner/actions.py) call one each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tableflow_core.errors import TableflowError
from tableflow_core.ingest.spec import DEFAULT_TABLE_PROPERTIES, PartitionFieldSpec, SortFieldSpec
from tableflow_core.schemas.write_schema import KEPT_COLUMN_DOC
from tableflow_core.sql_text import quote_ident

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType


class SchemaEvolutionError(TableflowError, RuntimeError):
    """The registry schema cannot be applied to the table in place."""


def spark_schema_for(arrow_schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema: tz-less Arrow timestamps are TimestampNTZType.

    (Spark's default maps every Arrow timestamp to TimestampType, which Iceberg stores as
    `timestamptz`: a local-timestamp column would then never match the registry schema.)
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema, prefer_timestamp_ntz=True)


def sql_type(data_type: DataType) -> str:
    """Spark SQL DDL for a type, with quoted nested names and NOT NULL kept."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        fields = ", ".join(
            f"{quote_ident(f.name)}: {sql_type(f.dataType)}{'' if f.nullable else ' NOT NULL'}"
            for f in data_type.fields
        )
        return f"STRUCT<{fields}>"
    if isinstance(data_type, ArrayType):
        return f"ARRAY<{sql_type(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"MAP<{sql_type(data_type.keyType)}, {sql_type(data_type.valueType)}>"
    return str(data_type.simpleString())


def partition_sql(field: PartitionFieldSpec) -> str:
    column = quote_ident(field.column)
    match field.transform:
        case "identity":
            return column
        case "bucket" | "truncate":
            return f"{field.transform}({field.param}, {column})"
        case "year" | "month" | "day" | "hour":
            return f"{field.transform}s({column})"
    raise ValueError(f"unknown partition transform {field.transform!r}")


def sort_sql(field: SortFieldSpec) -> str:
    direction = "DESC" if field.descending else "ASC"
    nulls = "NULLS FIRST" if field.nulls_first else "NULLS LAST"
    return f"{quote_ident(field.column)} {direction} {nulls}"


def _string_literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def create_table_sql(
    identifier: str,
    arrow_schema: pa.Schema,
    partition_by: Sequence[PartitionFieldSpec] = (),
    sort_by: Sequence[SortFieldSpec] = (),
    properties: Mapping[str, str] | None = None,
    *,
    with_namespace: bool = True,
) -> list[str]:
    """The statements creating table `identifier` (with `with_namespace`, its namespace
    too, if missing); `properties` go over DEFAULT_TABLE_PROPERTIES."""
    columns = ", ".join(
        f"{quote_ident(f.name)} {sql_type(f.dataType)}{'' if f.nullable else ' NOT NULL'}"
        for f in spark_schema_for(arrow_schema).fields
    )
    statements = [f"CREATE NAMESPACE IF NOT EXISTS {namespace_of(identifier)}"]
    if not with_namespace:
        statements.clear()
    create = f"CREATE TABLE {identifier} ({columns}) USING iceberg"
    if partition_by:
        create += " PARTITIONED BY (" + ", ".join(partition_sql(p) for p in partition_by) + ")"
    wanted = {**DEFAULT_TABLE_PROPERTIES, **(properties or {})}
    listed = ", ".join(f"{_string_literal(k)} = {_string_literal(v)}" for k, v in wanted.items())
    statements.append(f"{create} TBLPROPERTIES ({listed})")
    if sort_by:
        order = ", ".join(sort_sql(s) for s in sort_by)
        statements.append(f"ALTER TABLE {identifier} WRITE ORDERED BY {order}")
    return statements


def create_table(
    spark: SparkSession,
    identifier: str,
    schema: pa.Schema,
    partition_by: Sequence[PartitionFieldSpec] = (),
    sort_by: Sequence[SortFieldSpec] = (),
    properties: Mapping[str, str] | None = None,
    *,
    with_namespace: bool = True,
) -> None:
    statements = create_table_sql(
        identifier, schema, partition_by, sort_by, properties, with_namespace=with_namespace
    )
    for statement in statements:
        spark.sql(statement)


def namespace_of(identifier: str) -> str:
    """The quoted namespace part of a quoted table identifier."""
    return identifier.rsplit(".", 1)[0]


def create_namespace(spark: SparkSession, namespace: str) -> None:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")


def drop_table(spark: SparkSession, identifier: str) -> None:
    """Drop the table and its files (a replace, or `--prune`)."""
    spark.sql(f"DROP TABLE IF EXISTS {identifier} PURGE")


def set_properties(spark: SparkSession, identifier: str, properties: Mapping[str, str]) -> None:
    pairs = ", ".join(f"{_string_literal(k)} = {_string_literal(v)}" for k, v in properties.items())
    spark.sql(f"ALTER TABLE {identifier} SET TBLPROPERTIES ({pairs})")


def change_partition_spec(
    spark: SparkSession,
    identifier: str,
    current: Sequence[PartitionFieldSpec],
    desired: Sequence[PartitionFieldSpec],
) -> None:
    for term in current:
        if term not in desired:
            spark.sql(f"ALTER TABLE {identifier} DROP PARTITION FIELD {partition_sql(term)}")
    for term in desired:
        if term not in current:
            spark.sql(f"ALTER TABLE {identifier} ADD PARTITION FIELD {partition_sql(term)}")


def change_sort_order(
    spark: SparkSession, identifier: str, desired: Sequence[SortFieldSpec]
) -> None:
    if desired:
        order = ", ".join(sort_sql(s) for s in desired)
        spark.sql(f"ALTER TABLE {identifier} WRITE ORDERED BY {order}")
    else:
        spark.sql(f"ALTER TABLE {identifier} WRITE UNORDERED")


def _field_at(schema: pa.Schema, path: str) -> pa.Field:
    parts = path.split(".")
    fields: Any = schema
    found: pa.Field | None = None
    for part in parts:
        index = fields.get_field_index(part) if fields is not None else -1
        if index < 0:
            raise SchemaEvolutionError(f"column {path!r} is not in the desired schema")
        found = fields.field(index)
        fields = found.type if pa.types.is_struct(found.type) else None
    assert found is not None
    return found


def _column_path(path: str) -> str:
    return ".".join(quote_ident(p) for p in path.split("."))


def schema_change_statements(identifier: str, change: Any, desired: pa.Schema) -> list[str]:
    """The ALTER TABLE statements of one SchemaChange.

    `keep_column` (a column the topic's schema no longer has) makes it optional and marks
    it with KEPT_COLUMN_DOC, so that the next plan does not show it again;
    `restore_column` (the field is back) clears the mark.
    """

    column = f"{identifier} ALTER COLUMN {_column_path(change.path)}"
    if change.kind == "keep_column":
        return [
            f"ALTER TABLE {column} DROP NOT NULL",
            f"ALTER TABLE {column} COMMENT {_string_literal(KEPT_COLUMN_DOC)}",
        ]
    if change.kind == "restore_column":
        return [f"ALTER TABLE {column} COMMENT ''"]
    return [schema_change_sql(identifier, change, desired)]


def schema_change_sql(identifier: str, change: Any, desired: pa.Schema) -> str:
    """One ALTER TABLE statement for a SchemaChange (add_column/widen_type/make_optional)."""
    column = _column_path(change.path)
    field = _field_at(desired, change.path)
    spark_type = spark_schema_for(pa.schema([field])).fields[0].dataType
    if change.kind == "add_column":
        return f"ALTER TABLE {identifier} ADD COLUMN {column} {sql_type(spark_type)}"
    if change.kind == "widen_type":
        return f"ALTER TABLE {identifier} ALTER COLUMN {column} TYPE {sql_type(spark_type)}"
    if change.kind == "make_optional":
        return f"ALTER TABLE {identifier} ALTER COLUMN {column} DROP NOT NULL"
    raise SchemaEvolutionError(f"unknown schema change kind {change.kind!r} on {change.path!r}")


def apply_schema_changes(
    spark: SparkSession,
    identifier: str,
    diff: Any,
    desired: pa.Schema,
    *,
    table_name: str = "",
    topic: str = "",
) -> None:
    """Apply a SchemaDiff to the table, whose columns become `desired` (their types come
    from it); refuse (changing nothing) if it is incompatible."""
    if diff.incompatible:
        reasons = "; ".join(diff.incompatible)
        raise SchemaEvolutionError(
            f"table {table_name} ({identifier}) cannot follow the schema of topic "
            f"{topic!r}: {reasons}. Nothing was changed or committed."
        )
    statements = [
        statement
        for change in diff.changes
        for statement in schema_change_statements(identifier, change, desired)
    ]
    for statement in statements:
        spark.sql(statement)
