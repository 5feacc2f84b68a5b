"""Spark's Python worker daemon, with the modules tableflow's tasks use imported first.

Spark forks every Python worker from one daemon process (`spark.python.daemon.module`,
set by `engine/spark_session.py`). Workers forked from this daemon inherit the decode
path already imported (pyarrow, confluent-kafka, fastavro, the config models the task
closures reference) instead of each importing it again: measured ~1.5 s of CPU per
worker on the 2-core machine, paid once per Spark application here.
"""

from __future__ import annotations

from pyspark.daemon import manager

import tableflow_core.kafka.range_reader
import tableflow_core.pipeline.runners.decode
import tableflow_core.schemas.decoding  # noqa: F401

if __name__ == "__main__":
    manager()
