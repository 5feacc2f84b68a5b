"""Batches shaped like the pipeline's: sample data columns plus the hidden source position.

Used by the transform and check tests: real Spark DataFrames built in Spark tasks
(mapInArrow), carrying `__tf_partition` / `__tf_offset` as the decoded batch does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tableflow_core.dev.sample_data import generate, schema_for
from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.schemas.avro_types import map_avro_schema
from tableflow_core.transforms.sql import spark_type

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

HIDDEN_FIELDS = [
    pa.field(SOURCE_PARTITION_COLUMN, pa.int32(), nullable=False),
    pa.field(SOURCE_OFFSET_COLUMN, pa.int64(), nullable=False),
]


def sample_schema(dataset: str, version: int = 1) -> pa.Schema:
    """The table schema the decoder gives the sample dataset (no hidden columns)."""
    arrow_type = map_avro_schema(json.dumps(schema_for(dataset, version))).arrow_type
    return pa.schema(list(arrow_type))


def with_position(rows: list[dict[str, Any]], schema: pa.Schema, partitions: int = 4) -> pa.Table:
    """Rows as a batch read round-robin from `partitions` partitions (offsets per partition)."""
    for index, row in enumerate(rows):
        row[SOURCE_PARTITION_COLUMN] = index % partitions
        row[SOURCE_OFFSET_COLUMN] = index // partitions
    return pa.Table.from_pylist(rows, schema=pa.schema([*schema, *HIDDEN_FIELDS]))


def sample_rows(dataset: str, count: int, seed: int = 0) -> list[dict[str, Any]]:
    return [dict(r.value) for r in generate(dataset, count, seed=seed) if r.value is not None]


def ddl(schema: pa.Schema) -> str:
    return ", ".join(f"`{f.name}` {spark_type(f.type)}" for f in schema)


def frame(spark: SparkSession, table: pa.Table, slices: int = 2) -> DataFrame:
    """`table` as a Spark DataFrame produced by `slices` Spark tasks."""
    batches = table.to_batches(max_chunksize=max(1, -(-table.num_rows // slices)))

    def emit(iterator: Any) -> Any:
        for part in iterator:
            for index in part.column(0).to_pylist():
                if index < len(batches):
                    yield batches[index]

    return spark.range(len(batches), numPartitions=max(1, len(batches))).mapInArrow(
        emit, ddl(table.schema)
    )


def generated_frame(
    spark: SparkSession, schema: pa.Schema, make: Callable[[int], pa.Table], slices: int
) -> DataFrame:
    """A DataFrame whose slice `i` is `make(i)`, computed inside the Spark task."""

    def emit(iterator: Any) -> Any:
        for part in iterator:
            for index in part.column(0).to_pylist():
                yield from make(index).to_batches()

    return spark.range(slices, numPartitions=slices).mapInArrow(emit, ddl(schema))
