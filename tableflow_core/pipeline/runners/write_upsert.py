"""Upsert mode: MERGE INTO the branch by key, merge-on-read (position deletes).

Within the run, the last record per key by (partition, offset) wins; a tombstone deletes
the key's row (a no-op when the key is absent); a record after a tombstone re-inserts.
SQL MERGE cannot carry snapshot properties: the offsets go in the summary of the snapshot
the publish commits on top of the MERGE (pipeline/runners/publish.py), and main moves
over both at once.
"""

from __future__ import annotations

import time
import uuid

from tableflow_core.engine.test_hooks import crash_point
from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.ingest.columns import TOMBSTONE_COLUMN, is_hidden
from tableflow_core.ingest.stages import Write
from tableflow_core.pipeline.batch import Batch, StageContext
from tableflow_core.pipeline.runners.write import write_mode
from tableflow_core.sql_text import quote_ident

_RANK = "__tf_rank"


def merge_sql(target: str, source: str, columns: list[str], key_columns: tuple[str, ...]) -> str:
    on = " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in key_columns)
    updates = ", ".join(f"t.{quote_ident(c)} = s.{quote_ident(c)}" for c in columns)
    names = ", ".join(quote_ident(c) for c in columns)
    values = ", ".join(f"s.{quote_ident(c)}" for c in columns)
    tombstone = f"s.{quote_ident(TOMBSTONE_COLUMN)}"
    return (
        f"MERGE INTO {target} t USING {quote_ident(source)} s ON {on} "
        f"WHEN MATCHED AND {tombstone} THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {updates} "
        f"WHEN NOT MATCHED AND NOT {tombstone} THEN INSERT ({names}) VALUES ({values})"
    )


@write_mode("upsert")
def upsert(context: StageContext, spec: Write, batch: Batch) -> Batch:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    assert batch.good is not None
    spark = context.spark
    keys = [F.col(k) for k in spec.key_columns]
    latest_first = Window.partitionBy(*keys).orderBy(
        F.col(SOURCE_PARTITION_COLUMN).desc(), F.col(SOURCE_OFFSET_COLUMN).desc()
    )
    latest = (
        batch.good.withColumn(_RANK, F.row_number().over(latest_first))
        .where(F.col(_RANK) == 1)
        .drop(_RANK, SOURCE_PARTITION_COLUMN, SOURCE_OFFSET_COLUMN)
    )
    columns = [c for c in latest.columns if not is_hidden(c)]
    view = f"tableflow_upsert_{uuid.uuid4().hex}"
    latest.createOrReplaceTempView(view)
    started = time.perf_counter()
    try:
        spark.sql(merge_sql(context.branch_identifier, view, columns, spec.key_columns))
        context.timings["merge"] = time.perf_counter() - started
    finally:
        spark.catalog.dropTempView(view)
    crash_point("after_merge")
    return batch
