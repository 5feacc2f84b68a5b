"""read_ranges builds its frame in the JVM: one Spark partition (task) per range group."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.pipeline.runners.read_ranges import RANGES_SCHEMA, ranges_frame, task_groups

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.slow


def _partitions(frame: object) -> list[list[tuple[str, int, int, int]]]:
    rows = frame.rdd.glom().collect()  # type: ignore[attr-defined]
    return [[(r.topic, r.partition, r.start, r.end) for r in part] for part in rows]


def test_each_group_is_one_partition_with_its_ranges(spark: SparkSession) -> None:
    ranges = [
        OffsetRange("orders", 0, 0, 120_000),
        OffsetRange("orders", 1, 10, 30_010),
        OffsetRange("orders", 2, 5, 900),
        OffsetRange("orders", 3, 2**40, 2**40 + 7),
        OffsetRange("it's", 4, 0, 1),
    ]
    groups = task_groups(ranges)
    assert len(groups) == 4 and max(len(g) for g in groups) == 2  # 150.9k records
    frame = ranges_frame(spark, groups)
    assert (
        frame.schema.simpleString()
        == spark.createDataFrame([], RANGES_SCHEMA).schema.simpleString()
    )
    assert _partitions(frame) == [
        [(r.topic, r.partition, r.start, r.end) for r in group] for group in groups
    ]


def test_no_ranges_is_an_empty_frame(spark: SparkSession) -> None:
    frame = ranges_frame(spark, [])
    assert frame.count() == 0
    assert [f.name for f in frame.schema.fields] == ["topic", "partition", "start", "end"]
