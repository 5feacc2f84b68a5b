"""Upsert mode: MERGE INTO the branch by key, merge-on-read (position deletes).

Within the run, the last record per key by (partition, offset) wins; a tombstone deletes
the key's row (a no-op when the key is absent); a record after a tombstone re-inserts.
SQL MERGE cannot carry snapshot properties: the offsets go in the summary of the snapshot
the publish commits on top of the MERGE (pipeline/runners/publish.py), and main moves
over both at once.

The reduction to the last record per key is a subquery of the MERGE statement over the
decoded batch's view: Spark analyses the plan once for the MERGE instead of once more per
DataFrame step (window column, filter, drop) before it (benchmarks/upsert.py breakdown).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from tableflow_core.engine.test_hooks import crash_point
from tableflow_core.ingest.spec import quote_ident
from tableflow_core.pipeline.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.pipeline.batch import Batch, StageContext
from tableflow_core.pipeline.columns import TOMBSTONE_COLUMN, is_hidden
from tableflow_core.pipeline.runners.write import write_mode
from tableflow_core.pipeline.stages import Write

_RANK = "__tf_rank"


def latest_sql(view: str, columns: Sequence[str], key_columns: Sequence[str]) -> str:
    """The rows of `view` reduced to the last record per key by (partition, offset): the
    table's `columns` and the tombstone flag."""
    keys = ", ".join(quote_ident(k) for k in key_columns)
    order = f"{quote_ident(SOURCE_PARTITION_COLUMN)} DESC, {quote_ident(SOURCE_OFFSET_COLUMN)} DESC"
    names = ", ".join(quote_ident(c) for c in (*columns, TOMBSTONE_COLUMN))
    return (
        f"(SELECT {names} FROM (SELECT *, row_number() OVER (PARTITION BY {keys} "
        f"ORDER BY {order}) AS {quote_ident(_RANK)} FROM {quote_ident(view)}) "
        f"WHERE {quote_ident(_RANK)} = 1)"
    )


def merge_sql(target: str, source: str, columns: list[str], key_columns: tuple[str, ...]) -> str:
    """`source`: a view name or a parenthesised query (`latest_sql`)."""
    on = " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in key_columns)
    updates = ", ".join(f"t.{quote_ident(c)} = s.{quote_ident(c)}" for c in columns)
    names = ", ".join(quote_ident(c) for c in columns)
    values = ", ".join(f"s.{quote_ident(c)}" for c in columns)
    tombstone = f"s.{quote_ident(TOMBSTONE_COLUMN)}"
    source = source if source.startswith("(") else quote_ident(source)
    return (
        f"MERGE INTO {target} t USING {source} s ON {on} "
        f"WHEN MATCHED AND {tombstone} THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {updates} "
        f"WHEN NOT MATCHED AND NOT {tombstone} THEN INSERT ({names}) VALUES ({values})"
    )


@write_mode("upsert")
def upsert(context: StageContext, spec: Write, batch: Batch) -> Batch:
    assert batch.good is not None
    spark = context.spark
    columns = [c for c in batch.good.columns if not is_hidden(c)]
    view = f"tableflow_upsert_{uuid.uuid4().hex}"
    batch.good.createOrReplaceTempView(view)
    started = time.perf_counter()
    try:
        source = latest_sql(view, columns, spec.key_columns)
        spark.sql(merge_sql(context.branch_identifier, source, columns, spec.key_columns))
        context.timings["merge"] = time.perf_counter() - started
    finally:
        spark.catalog.dropTempView(view)
    crash_point("after_merge")
    return batch
