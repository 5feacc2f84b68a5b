"""Upsert mode: MERGE INTO the branch by key, merge-on-read (position deletes).

One answer per key whatever the run boundaries (`ingest/upsert_order.py`): a key's
records are ordered by (Kafka timestamp, partition, offset). Within the run the latest
record per key wins (a window in Spark); it is applied only when it is later than what
the table holds for the key: the position stored in the row it would replace, or the
position of the key's latest delete in the table's deletes table. A tombstone (or a
record a filter took out) deletes the key's row; the deletes table remembers its
position, so an older record of the key read by a later run does not bring the row back.

How the batch meets the table (docs/architecture.md "Upsert batches that stay cheap as
the table grows"): a batch of at most `BROADCAST_RECORDS` records is broadcast to the
table's scan, so the table's rows (its key and position columns only) are matched where
they are read and never shuffled: first the batch's keys the table does not hold are
appended, then one MERGE with only WHEN MATCHED clauses (an inner join, which Spark can
broadcast; a MERGE with WHEN NOT MATCHED is an outer join that cannot broadcast the
batch) applies the rest. A key just appended matches its own row at the same position,
which is not later: the MERGE leaves it. A larger batch (a backfill) takes one MERGE
that shuffles both sides. A batch into an empty table (a first load) is only appended,
whatever its size.

Only keys the table does not hold are compared with the deletes table (a held row comes
after every delete its key remembers: `append_new_keys`).

SQL MERGE cannot carry snapshot properties: the offsets go in the summary of the snapshot
the publish commits on top of the MERGE (pipeline/runners/publish.py), and main moves
over both at once. The deletes table is written before the MERGE and the publish: a run
that does not publish leaves there only positions of records the next run reads again
(replaying them gives the same answer).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from tableflow_core.engine.ddl import create_table
from tableflow_core.engine.test_hooks import crash_point
from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.ingest.columns import SOURCE_TIMESTAMP_COLUMN, TOMBSTONE_COLUMN, is_hidden
from tableflow_core.ingest.stages import Write
from tableflow_core.ingest.upsert_order import (
    CDC_LAST_COMMIT_COLUMN,
    CDC_LSN_COLUMN,
    DELETES_TABLE_PROPERTIES,
    POSITION_COLUMNS,
    deletes_table,
    order_columns,
)
from tableflow_core.pipeline.batch import Batch, StageContext
from tableflow_core.pipeline.runners.write import write_mode
from tableflow_core.sql_text import quote_ident

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_RANK = "__tf_rank"
# Before any Kafka timestamp: where a record without one sorts.
_FIRST = "TIMESTAMP'0001-01-01 00:00:00Z'"
_NO_LSN = "-9223372036854775808L"  # where a change without a source position sorts
_DELETED_AT = "__tf_deleted_at"  # a key's latest remembered delete, joined to the batch
# A batch read from at most this many Kafka records (an upper bound of its keys, known
# before reading) takes the broadcast way (`append_new_keys`, then a WHEN MATCHED-only
# MERGE); Spark broadcasts it when its cached size is also under
# spark.sql.autoBroadcastJoinThreshold (64 MB in the session defaults), else that way's
# inner join is shuffled. A larger batch (a first load) takes one MERGE, shuffled.
BROADCAST_RECORDS = 500_000


def later(new: str, old: str, cdc: bool = False) -> str:
    """SQL: the record at position `new.*` comes after the one at `old.*` (a NULL
    position, a row written before the table kept positions, is earlier than any). With
    `cdc` (a change stream's mirror): by source position when both have one, the Kafka
    position breaking ties; else by the Kafka position (ingest/upsert_order.py)."""
    ts, partition, offset = (quote_ident(c) for c in POSITION_COLUMNS)
    commit, lsn = quote_ident(CDC_LAST_COMMIT_COLUMN), quote_ident(CDC_LSN_COLUMN)

    def position(side: str) -> str:
        return (
            f"named_struct('t', coalesce({side}.{ts}, {_FIRST}), "
            f"'p', {side}.{partition}, 'o', {side}.{offset})"
        )

    def source_position(side: str) -> str:
        return (
            f"named_struct('c', coalesce({side}.{commit}, {_NO_LSN}), 'l', {side}.{lsn}, "
            f"'k', {position(side)})"
        )

    kafka = f"({old}.{offset} IS NULL OR {position(new)} > {position(old)})"
    if not cdc:
        return kafka
    both = f"{new}.{lsn} IS NOT NULL AND {old}.{lsn} IS NOT NULL"
    return (
        f"(CASE WHEN {both} THEN {source_position(new)} > {source_position(old)} ELSE {kafka} END)"
    )


def merge_sql(
    target: str,
    source: str,
    columns: list[str],
    key_columns: tuple[str, ...],
    insert: bool = True,
    cdc: bool = False,
) -> str:
    """MERGE the batch's latest record per key (view `source`) into `target`: delete or
    update a key's row for a later record; with `insert`, insert the keys it lacks."""
    on = " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in key_columns)
    updates = ", ".join(f"t.{quote_ident(c)} = s.{quote_ident(c)}" for c in columns)
    names = ", ".join(quote_ident(c) for c in columns)
    values = ", ".join(f"s.{quote_ident(c)}" for c in columns)
    tombstone = f"s.{quote_ident(TOMBSTONE_COLUMN)}"
    newer = later("s", "t", cdc)
    sql = (
        f"MERGE INTO {target} t USING {quote_ident(source)} s ON {on} "
        f"WHEN MATCHED AND {tombstone} AND {newer} THEN DELETE "
        f"WHEN MATCHED AND NOT {tombstone} AND {newer} THEN UPDATE SET {updates}"
    )
    if insert:
        sql += f" WHEN NOT MATCHED AND NOT {tombstone} THEN INSERT ({names}) VALUES ({values})"
    return sql


def broadcasts(records: int) -> bool:
    """Whether a batch read from `records` Kafka records is broadcast to the table's scan."""
    return records <= BROADCAST_RECORDS


def _keys_match(left: DataFrame, right: DataFrame, keys: tuple[str, ...]) -> Column:
    """left.k = right.k for every key column (two frames holding the same key names)."""
    condition: Column | None = None
    for k in keys:
        term = left[quote_ident(k)] == right[quote_ident(k)]
        condition = term if condition is None else condition & term
    assert condition is not None, "an upsert table has a key"
    return condition


def _new_keys(
    target: DataFrame,
    latest: DataFrame,
    keys: tuple[str, ...],
    deletes: DataFrame | None,
    cdc: bool,
) -> DataFrame:
    """The batch's latest records (not tombstones) of keys the table does not hold and that
    come after their key's latest remembered delete (`deletes`: the deletes table, when
    the table has one). The table's key column is matched against the broadcast batch
    keys where it is read; only these keys' deletes are read."""
    from pyspark.sql import functions as F

    key_cols = [F.col(quote_ident(k)) for k in keys]
    batch_keys = latest.select(*key_cols)
    table_keys = target.select(*key_cols)
    held = table_keys.join(
        F.broadcast(batch_keys), _keys_match(table_keys, batch_keys, keys), "left_semi"
    )
    fresh = latest.join(F.broadcast(held), _keys_match(latest, held, keys), "left_anti")
    fresh = fresh.where(~F.col(TOMBSTONE_COLUMN))
    # The deletes read for the batch's keys (cached), not for `fresh`'s: broadcasting
    # `fresh`'s keys would compute it, and read the table, a second time.
    return fresh if deletes is None else _after_deletes(fresh, deletes, keys, latest, cdc)


def _run_merge(
    spark: SparkSession,
    target: str,
    latest: DataFrame,
    keys: tuple[str, ...],
    insert: bool,
    cdc: bool,
) -> None:
    columns = [c for c in latest.columns if not is_hidden(c)]
    view = f"tableflow_upsert_{uuid.uuid4().hex}"
    latest.createOrReplaceTempView(view)
    try:
        spark.sql(merge_sql(target, view, columns, keys, insert=insert, cdc=cdc))
    finally:
        spark.catalog.dropTempView(view)


def append_new_keys(
    context: StageContext, latest: DataFrame, keys: tuple[str, ...], deletes: DataFrame | None
) -> None:
    """The broadcast way's first write: the batch's latest records of keys the table does
    not hold (after their remembered deletes) appended to the run's branch, in one job
    that reads the table's keys (no count first: a batch without new keys makes an append
    snapshot without files on the branch). The MERGE that follows (WHEN MATCHED only, the
    batch broadcast: the table is read, not shuffled) applies the rest; a key just
    appended matches its own row at the same position, which is not later.

    Only the new keys are compared with the deletes table: a row the table holds comes
    after every delete its key remembers (a delete later than the row removed it), so
    for a held key the row's own position is the comparison. The one exception, a run
    that remembered a delete and did not publish, is redone from the same offsets: its
    batch holds that delete (or a later record of the key) again."""
    from pyspark.sql import functions as F

    target = context.branch_identifier
    cdc = _is_change_stream(context)
    columns = [F.col(quote_ident(c)) for c in latest.columns if not is_hidden(c)]
    if context.base_rows == 0:  # a first run: every key is new
        fresh = latest.where(~F.col(TOMBSTONE_COLUMN))
        if deletes is not None:  # a large batch's keys are not broadcast to the deletes
            small = broadcasts(sum(r.size for r in context.ranges))
            fresh = _after_deletes(fresh, deletes, keys, latest if small else None, cdc)
    else:
        fresh = _new_keys(context.spark.table(target), latest, keys, deletes, cdc)
    fresh.select(*columns).writeTo(target).append()


def _is_change_stream(context: StageContext) -> bool:
    """The table mirrors a change stream: its order is the source's first."""
    return context.spec.value.envelope is not None


def _latest_per_key(good: DataFrame, key_columns: tuple[str, ...], cdc: bool) -> DataFrame:
    """Each key's latest record of the batch, with its position in POSITION_COLUMNS."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ts, partition, offset = POSITION_COLUMNS
    positioned = good.withColumns(
        {
            ts: F.timestamp_millis(F.col(SOURCE_TIMESTAMP_COLUMN)),
            partition: F.col(SOURCE_PARTITION_COLUMN).cast("int"),
            offset: F.col(SOURCE_OFFSET_COLUMN).cast("long"),
        }
    )
    source = (
        [F.col(quote_ident(c)).desc_nulls_last() for c in (CDC_LAST_COMMIT_COLUMN, CDC_LSN_COLUMN)]
        if cdc
        else []
    )
    latest_first = Window.partitionBy(*[F.col(quote_ident(k)) for k in key_columns]).orderBy(
        *source, F.col(ts).desc_nulls_last(), F.col(partition).desc(), F.col(offset).desc()
    )
    return (
        positioned.withColumn(_RANK, F.row_number().over(latest_first))
        .where(F.col(_RANK) == 1)
        .drop(_RANK, SOURCE_PARTITION_COLUMN, SOURCE_OFFSET_COLUMN, SOURCE_TIMESTAMP_COLUMN)
    )


def _position(cdc: bool = False) -> Column:
    """A record's position (POSITION_COLUMNS; with `cdc` its source position first) as one
    comparable value."""
    from pyspark.sql import functions as F

    ts, partition, offset = (F.col(quote_ident(c)) for c in POSITION_COLUMNS)
    kafka = F.struct(
        F.coalesce(ts, F.expr(_FIRST)).alias("t"), partition.alias("p"), offset.alias("o")
    )
    if not cdc:
        return kafka
    commit, lsn = (F.col(quote_ident(c)) for c in (CDC_LAST_COMMIT_COLUMN, CDC_LSN_COLUMN))
    return F.struct(
        F.coalesce(commit, F.expr(_NO_LSN)).alias("c"),
        F.coalesce(lsn, F.expr(_NO_LSN)).alias("l"),
        kafka.alias("k"),
    )


def _at_or_after(position: Column, deleted_at: Column, cdc: bool) -> Column:
    """`position` (a `_position(cdc)` value) is at or after `deleted_at`'s: by source
    position when both have one, else by Kafka position."""
    from pyspark.sql import functions as F

    if not cdc:
        return position >= deleted_at
    no_lsn = F.expr(_NO_LSN)
    both = (position["l"] != no_lsn) & (deleted_at["l"] != no_lsn)
    return F.when(both, position >= deleted_at).otherwise(position["k"] >= deleted_at["k"])


def _after_deletes(
    latest: DataFrame,
    deletes: DataFrame,
    keys: tuple[str, ...],
    read_for: DataFrame | None,
    cdc: bool = False,
) -> DataFrame:
    """The records of `latest` that come after their key's latest remembered delete (or
    whose key has none): an older one would bring back a row a later delete removed.
    The delete itself (a run that wrote the deletes table and did not publish) is applied
    again. With `read_for` (a small frame holding the keys, e.g. the cached batch), only
    those keys' deletes are read (its keys broadcast to the deletes table's scan), not
    every delete the table remembers."""
    from pyspark.sql import functions as F

    if read_for is not None:
        batch_keys = read_for.select(*[F.col(quote_ident(k)) for k in keys])
        match = _keys_match(deletes, batch_keys, keys)
        deletes = deletes.join(F.broadcast(batch_keys), match, "left_semi")
    remembered = deletes.groupBy(
        *[F.col(quote_ident(k)).alias(f"{_DELETED_AT}k{i}") for i, k in enumerate(keys)]
    ).agg(F.max(_position(cdc)).alias(_DELETED_AT))
    on: Column | None = None
    for i, k in enumerate(keys):
        term = F.col(quote_ident(k)) == F.col(f"{_DELETED_AT}k{i}")
        on = term if on is None else on & term
    joined = latest.join(remembered, on=on, how="left")
    deleted_at = F.col(_DELETED_AT)
    # At the same position: the very delete, remembered by a run that did not publish.
    keep = deleted_at.isNull() | _at_or_after(_position(cdc), deleted_at, cdc)
    return joined.where(keep).select(*latest.columns)


def _deletes_of(context: StageContext) -> str | None:
    """The table's deletes table (Spark identifier), when it has one."""
    spec = context.spec
    exists = context.catalog.catalog.table_exists((*spec.namespace, deletes_table(spec.table)))
    return deletes_table(spec.identifier) if exists else None


def _remember_deletes(
    context: StageContext, latest: DataFrame, keys: tuple[str, ...], existing: str | None
) -> None:
    """Append the batch's latest deletes to the deletes table (created on first use): one
    write, no MERGE (the latest per key counts when it is read)."""
    from pyspark.sql import functions as F

    spark = context.spark
    order = order_columns(_is_change_stream(context))
    rows = latest.where(F.col(TOMBSTONE_COLUMN)).select(
        *[F.col(quote_ident(c)) for c in (*keys, *order)]
    )
    target = existing or deletes_table(context.spec.identifier)
    if existing is None:
        schema = _arrow_schema(rows)
        create_table(spark, target, schema, properties=DELETES_TABLE_PROPERTIES)
    rows.writeTo(target).append()


def _arrow_schema(rows: DataFrame) -> object:
    """The Arrow schema of a Spark frame's columns (the deletes table's)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(rows.schema)


def _deletes_in(batch: Batch) -> bool:
    """Whether the batch held a delete: a tombstone, or a record a filter took out (known
    after the MERGE read the batch)."""
    if batch.tombstones:
        return True
    return batch.transforms is not None and batch.transforms.counts().filtered > 0


@write_mode("upsert")
def upsert(context: StageContext, spec: Write, batch: Batch) -> Batch:
    assert batch.good is not None
    spark = context.spark
    keys = spec.key_columns
    cdc = _is_change_stream(context)
    small = broadcasts(sum(r.size for r in context.ranges))
    deletes = _deletes_of(context)
    # Read by the deletes' join, the write(s), then the deletes' append when the batch
    # held deletes (known only once the batch was read): read and decode Kafka once.
    cached: list[DataFrame] = []

    def release() -> None:  # a frame before the frames it was read from
        for frame in reversed(cached):
            frame.unpersist()

    context.cleanups.append(release)
    latest = _latest_per_key(batch.good, keys, cdc).persist()
    cached.append(latest)
    # Filled by one plain action: the stages' observed counts (decode, transforms) come
    # from the first query that reads the batch, and the strategies' first queries read
    # it several times at once (their broadcasts), which left the counts unfilled.
    # Materialized, the batch has its true size: Spark broadcasts it to the MERGE (a join
    # hint on a MERGE's source is lost in Spark 3.5's rewrite) when it is under
    # spark.sql.autoBroadcastJoinThreshold (engine/spark_session.py).
    latest.count()
    started = time.perf_counter()
    remembered = spark.table(deletes) if deletes is not None else None
    # A batch into an empty table (a first load, whatever its size): every key is new,
    # its latest records are appended (after their remembered deletes), no MERGE.
    first_load = context.base_rows == 0
    if small or first_load:
        append_new_keys(context, latest, keys, remembered)
    elif remembered is not None:
        latest = _after_deletes(latest, remembered, keys, None, cdc).persist()
        cached.append(latest)
        latest.count()
    context.timings["merge"] = time.perf_counter() - started
    if _deletes_in(batch):
        started = time.perf_counter()
        _remember_deletes(context, latest, keys, deletes)
        context.timings["remember_deletes"] = time.perf_counter() - started
    # Last: dropping the MERGE's view uncaches `latest` (Spark's dropTempView uncaches the
    # view's plan), so nothing reads the batch after it (the deletes' append above read
    # it from the cache; after the MERGE it read and decoded Kafka again).
    started = time.perf_counter()
    if not first_load:  # (a first load appended above: nothing to update or delete)
        # small: WHEN MATCHED only, the batch broadcast; else one MERGE, both sides shuffled
        _run_merge(spark, context.branch_identifier, latest, keys, insert=not small, cdc=cdc)
    context.timings["merge"] += time.perf_counter() - started
    crash_point("after_merge")
    return batch
