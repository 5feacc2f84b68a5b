"""Start Spark's Python worker daemon before the first Kafka read needs it.

Spark starts the daemon that forks its Python workers (`pipeline/worker_daemon.py`) when
the application's first Python task runs, and that daemon imports the decode path first
(~0.9 s of CPU). Left alone, that first task is the first table's Kafka read, so each
of the read's first tasks waited for the daemon: on the 2-core benchmark machine they
ran ~1.3 s longer than the tasks after them. `start_python_workers` runs one tiny
`mapInArrow` task on a daemon thread as soon as the session exists, while `apply` and
`run` are still making the plan, creating tables and cutting the run's branch; the read's
tasks then find the daemon (and an idle worker) ready. Measured on `tableflow apply` of
1M records into one table (6 A/B rounds, medians): the command 11.93 s -> 11.27 s, the
table's run 7.02 s -> 6.21 s. An apply with nothing to read pays the daemon's start
(~1 s of CPU on its own thread) for nothing.

The task is a SQL `mapInArrow`, like the read: Spark keeps one daemon per Python
executable and worker environment, and an RDD task's environment differs (it would
start a second daemon). A warm-up that fails is of no consequence: the read starts the
daemon itself, as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

LOG = logging.getLogger(__name__)
WARM_UP_GROUP = "tableflow-python-workers"
WARM_UP_JOB = "tableflow: start the Python workers"


def pass_batches(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    """The warm-up task's function (module level: the worker imports it by name)."""
    yield from batches


def start_python_workers(spark: SparkSession) -> threading.Thread | None:
    """Build the warm-up task's frame here, run it on a daemon thread (returned; None if
    the frame could not be built). Building it here does pyspark's imports for
    `mapInArrow` on the caller's thread (the thread that built the session): importing
    pyspark's modules on two threads at once can end in Python's import deadlock error."""
    try:
        # On a session of its own (same application, its own SQL conf): Spark copies the
        # SQL conf into the job's properties, and the catalog's secrets, set on `spark`
        # meanwhile, must not reach them (see `register_catalog`).
        own = spark.newSession()
        frame = own.sql("SELECT 1 AS warm").mapInArrow(pass_batches, "warm int")
    except Exception as exc:  # the read starts the daemon itself
        LOG.debug("starting the Python workers early failed: %s", exc)
        return None

    def run() -> None:
        try:
            spark.sparkContext.setJobGroup(WARM_UP_GROUP, WARM_UP_JOB)
            frame.collect()
        except Exception as exc:
            LOG.debug("starting the Python workers early failed: %s", exc)

    thread = threading.Thread(target=run, name="tableflow-python-workers", daemon=True)
    thread.start()
    return thread
