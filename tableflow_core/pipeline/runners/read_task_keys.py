"""The read tasks' work on keys for one run (`pipeline/task_keys.py`): what they do, and
the audit that judges the dedup they ran.

`task_keys_of` decides, from the table's config and the run, whether the read tasks
run the table's dedup or only report its keys (`pipeline/transforms/read_task_dedup.py`), and
which `unique` checks' keys they report (`pipeline/checks/read_task_unique.py`); `start_reports`
starts the accumulator they report to (`KeyReports`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tableflow_core.errors import KeysAcrossReadTasks
from tableflow_core.pipeline.batch import Audit, Batch, StageContext
from tableflow_core.pipeline.checks.read_task_unique import unique_keys_in_read_tasks
from tableflow_core.pipeline.runners.read_ranges import task_groups
from tableflow_core.pipeline.task_keys import KeyReportParam, KeyReports, TaskKeys
from tableflow_core.pipeline.transforms.read_task_dedup import (
    describe_fallback,
    run_summary,
    task_dedup,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def task_keys_of(context: StageContext) -> TaskKeys:
    """What the run's read tasks do with keys (an empty TaskKeys: nothing)."""
    dedup = task_dedup(context.spec, context.ranges, context.dedup_in_read_tasks)
    unique = unique_keys_in_read_tasks(context.spec, context.ranges)
    return TaskKeys(dedup=dedup, unique=unique)


def start_reports(spark: SparkSession, context: StageContext, keys: TaskKeys) -> KeyReports:
    """The accumulator the read tasks report to, emptied again when the run ends."""
    accumulator = spark.sparkContext.accumulator({}, KeyReportParam())
    reports = KeyReports(accumulator, len(task_groups(context.ranges)), keys)
    context.cleanups.append(reports.release)
    return reports


@dataclass(frozen=True)
class DedupAcrossReadTasks(Audit):
    """After the write, before publish (the run's first audit): did two read tasks keep
    one dedup key? The outcome goes in the publish commit's summary; when the read tasks
    ran the dedup, such a key (or a missing report) raises KeysAcrossReadTasks: the engine
    drops the branch and runs the table again with Spark's shuffle dedup."""

    reports: KeyReports

    def run(self, context: StageContext, batch: Batch) -> None:
        dedup = self.reports.keys.dedup
        assert dedup is not None, "a dedup audit needs the run's dedup"
        across = self.reports.dedup_keys_across_tasks()
        table = f"{context.spec.table_name} ({context.spec.identifier})"
        if across is None:  # never expected: then nothing proves the tasks disjoint
            if dedup.flags:
                raise KeysAcrossReadTasks(
                    f"table {table}: not every read task reported its dedup keys", keys=0
                )
            return
        if across and dedup.flags:
            raise KeysAcrossReadTasks(describe_fallback(table, across), keys=across)
        context.publish_properties.update(run_summary(dedup, across, self.reports.tasks))
