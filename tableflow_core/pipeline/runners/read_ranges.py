"""read_ranges: the run's offset ranges as a DataFrame, one partition (Spark task) each.

No data moves yet: the decode stage reads each range inside its task.
"""

from __future__ import annotations

from tableflow_core.pipeline.batch import Batch, StageContext
from tableflow_core.pipeline.registry import stage_runner
from tableflow_core.pipeline.stages import ReadRanges

RANGES_SCHEMA = "topic string, partition int, start long, `end` long"


@stage_runner(ReadRanges)
def read_ranges(context: StageContext, spec: ReadRanges, batch: Batch) -> Batch:
    rows = [(r.topic, r.partition, r.start, r.end) for r in context.ranges]
    rdd = context.spark.sparkContext.parallelize(rows, max(1, len(rows)))
    return batch.evolve(good=context.spark.createDataFrame(rdd, RANGES_SCHEMA))
