"""Small Spark helpers shared by the dead-letter modules (driver side, aggregates only)."""

from __future__ import annotations

import re
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


_JAVA_ERROR = re.compile(r"^(?::\s*)?(?:Caused by: )?([\w.$]+(?:Exception|Error)): (.+)$")
_WRAPPER = ("py4j.protocol.Py4JJavaError", "An error occurred while calling")


def spark_error_summary(error: BaseException, limit: int = 400) -> str:
    """The telling part of a Spark/JVM error: its deepest `Caused by`, else its first cause.

    A JVM failure reaches Python as "An error occurred while calling o45.table." followed
    by a Java stack trace; the root cause (e.g. `java.net.ConnectException: Connection
    refused`) is what users need.
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    causes = [
        f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2)}"
        for line in lines
        if (m := _JAVA_ERROR.match(line)) and not line.startswith(_WRAPPER)
    ]
    if causes:
        deepest = causes[-1]
        first = causes[0]
        text = first if deepest == first else f"{first} (caused by {deepest})"
        return text[:limit]
    meaningful = [line for line in lines if not line.startswith(_WRAPPER)]
    return (meaningful[0] if meaningful else type(error).__name__)[:limit]
