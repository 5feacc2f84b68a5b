"""Spark's Python worker daemon starts with the session, before the first read needs it."""

from __future__ import annotations

import os
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
    """This test process's (its Spark JVM's) processes running tableflow's worker daemon
    module (Spark forks workers from it); other test runs on the machine have their own."""
    count = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            arguments = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"tableflow_core.pipeline.worker_daemon" in arguments:
            count += _descends_from(int(cmdline.parent.name), os.getpid())
    return count


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent's pid
    return False


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
