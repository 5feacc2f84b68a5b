"""read_ranges: the run's offset ranges as a DataFrame, grouped into Spark tasks.

No data moves yet: the decode stage reads each range inside its task. A task costs a
Kafka consumer, a decoder and a data file whatever it reads, so a small run's ranges
share tasks (`task_groups`); large ranges get a task each, as the plan split them
(`max_records_per_task`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tableflow_core.ingest.stages import ReadRanges
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.pipeline.batch import Batch, StageContext
from tableflow_core.pipeline.registry import stage_runner
from tableflow_core.sql_text import sql_string

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RANGES_SCHEMA = "topic string, partition int, start long, `end` long"

# Records below which another task is not worth its start-up.
MIN_RECORDS_PER_TASK = 50_000


def task_groups(
    ranges: Sequence[OffsetRange], min_records: int | None = None
) -> list[list[OffsetRange]]:
    """The ranges grouped into as many tasks as there are `min_records` to read (at most
    one per range, at least one; default MIN_RECORDS_PER_TASK), the largest ranges first
    into the lightest task."""
    if not ranges:
        return []
    if min_records is None:
        min_records = MIN_RECORDS_PER_TASK
    total = sum(r.end - r.start for r in ranges)
    count = max(1, min(len(ranges), math.ceil(total / min_records)))
    groups: list[list[OffsetRange]] = [[] for _ in range(count)]
    loads = [0] * count
    for offset_range in sorted(ranges, key=lambda r: r.end - r.start, reverse=True):
        lightest = loads.index(min(loads))
        groups[lightest].append(offset_range)
        loads[lightest] += offset_range.end - offset_range.start
    return groups


@stage_runner(ReadRanges)
def read_ranges(context: StageContext, spec: ReadRanges, batch: Batch) -> Batch:
    return batch.evolve(good=ranges_frame(context.spark, task_groups(context.ranges)))


def ranges_frame(spark: SparkSession, groups: Sequence[Sequence[OffsetRange]]) -> DataFrame:
    """The ranges as a DataFrame (RANGES_SCHEMA), each group in its own Spark partition.

    Built in the JVM (a range of group numbers, one per partition, each expanded to its
    literal ranges), so no Python worker runs for it: before, a Python RDD (parallelize +
    flatMap) pickled the groups through a Python worker. Measured neutral on CPU and memory
    at 200k and 1M records (benchmarks/memory.py --baseline-src); one run on the old code
    showed a second worker daemon with two idle workers (~190 MB), not seen again.

    The query is SQL text, one call into the JVM: built from `pyspark.sql.functions` the
    literal took ~200 round trips for 4 ranges.
    """
    if not groups:
        return spark.createDataFrame([], RANGES_SCHEMA)
    literal = (
        "array("
        + ", ".join("array(" + ", ".join(_range_struct(r) for r in group) + ")" for group in groups)
        + ")"
    )
    count = len(groups)
    # SQL's range table function, not `spark.range`: that one builds a typed Dataset whose
    # encoder's first use in a JVM loaded classes for ~0.3 s (0.38 s against 0.09 s for
    # this frame in a fresh `apply` JVM).
    return spark.sql(
        f"SELECT inline(element_at({literal}, CAST(id + 1 AS INT))) "
        f"FROM range(0, {count}, 1, {count})"
    )


def _range_struct(offset_range: OffsetRange) -> str:
    return (
        f"named_struct('topic', {sql_string(offset_range.topic)}, "
        f"'partition', CAST({int(offset_range.partition)} AS INT), "
        f"'start', CAST({int(offset_range.start)} AS BIGINT), "
        f"'end', CAST({int(offset_range.end)} AS BIGINT))"
    )
