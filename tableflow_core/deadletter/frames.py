"""Small Spark helpers shared by the dead-letter modules (driver side, aggregates only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


def spark_schema(arrow_schema: pa.Schema) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema)


def count_by_partition(frame: DataFrame) -> dict[int, int]:
    """{source_partition: rows}; only the counts reach the driver."""
    rows = frame.groupBy("source_partition").count().collect()
    return {int(row["source_partition"]): int(row["count"]) for row in rows}


def require_columns(frame: DataFrame, schema: pa.Schema, what: str) -> None:
    missing = [name for name in schema.names if name not in frame.columns]
    if missing:
        raise ValueError(f"{what} lacks column(s) {missing}; expected {schema.names}")
