"""Spark's Python worker daemon starts with the session, before the first read needs it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tableflow_core.engine.python_workers import (
    WARM_UP_GROUP,
    pass_batches,
    start_python_workers,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.slow


def _worker_daemons() -> int:
    """Processes running tableflow's worker daemon module (Spark forks workers from it)."""
    count = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            arguments = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        count += b"tableflow_core.pipeline.worker_daemon" in arguments
    return count


def test_the_warm_up_task_runs_on_the_daemon_the_reads_use(spark: SparkSession) -> None:
    thread = start_python_workers(spark)
    assert thread is not None
    thread.join(120)
    assert not thread.is_alive()
    tracker = spark.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(WARM_UP_GROUP)
    assert jobs, "the warm-up ran no Spark job"
    assert {tracker.getJobInfo(job).status for job in jobs} == {"SUCCEEDED"}
    daemons = _worker_daemons()
    assert daemons >= 1
    # A read's mapInArrow task (SQL, as the decode stage runs it) forks from the same
    # daemon: an RDD task's worker environment differs and would start another one.
    rows = spark.sql("SELECT 7 AS x").mapInArrow(pass_batches, "x int").collect()
    assert [r.x for r in rows] == [7]
    assert _worker_daemons() == daemons
