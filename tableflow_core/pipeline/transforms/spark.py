"""Compiled transforms run on a Spark DataFrame (the batch of one run of one table).

The input carries the table's columns plus the hidden source position columns
(`__tf_partition`, `__tf_offset`); the output keeps them. Rows are never silently
lost: every row ends up in exactly one place, counted, via a hidden "fate" column:
kept, filtered out, dropped as a duplicate, or rejected (a derived value that does not
fit its planned type, or a plain CAST in a derive or filter that fails on the row, which
Spark would turn into NULL) into `rejected_df` in REJECTED_ROW_SCHEMA for the dead-letter
stage. Counting costs no extra pass: an observation on the tagged batch collects the
counts during the first action that reads it (the checks' row count or the write).
Persisting is the caller's choice (measured: caching a 300k-row batch with nested
columns cost twice the Iceberg write itself, so it is done only where several jobs
read the same batch, e.g. before the checks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from tableflow_core.engine.observations import (
    OBSERVATION_TIMEOUT_S,
    observe_counts,
    observed_metrics,
)
from tableflow_core.ingest.bad_records import (
    ROW_JSON_COLUMN,
    SOURCE_OFFSET_COLUMN,
    SOURCE_PARTITION_COLUMN,
)
from tableflow_core.ingest.columns import (
    RETRACTION_COLUMN,
    SOURCE_TIMESTAMP_COLUMN,
    TOMBSTONE_COLUMN,
)
from tableflow_core.ingest.placement import execution_order
from tableflow_core.sql_text import quote_ident, sql_string
from tableflow_core.transforms.compile import (
    CompiledTransforms,
    DedupStep,
    DeriveStep,
    DropStep,
    FilterStep,
    MaskStep,
    RenameStep,
    TransformStep,
)
from tableflow_core.transforms.sql import CastCheck, parse_expression, referenced_columns

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, Observation, SparkSession
    from pyspark.sql.types import DataType, StructType

FATE_COLUMN = "__tf_fate"
ERROR_COLUMN = "__tf_error"
SALT_COLUMN_PREFIX = "__tf_salt_"
HIDDEN_COLUMNS = (SOURCE_PARTITION_COLUMN, SOURCE_OFFSET_COLUMN)
TRANSFORM_STAGE = "transform"
REJECT_ERROR_CLASS = "TransformValueError"

# In a reason, in place of a value read from a masked column.
MASKED_VALUE = "<value of a masked column, not shown>"

FILTERED = "filtered"
DUPLICATE = "duplicate"
REJECTED = "rejected"


@dataclass(frozen=True)
class TransformCounts:
    rows_in: int
    rows_out: int
    filtered: int
    duplicates: int
    rejected: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def plus_read_task_duplicates(self, duplicates: int) -> TransformCounts:
        """These counts of the rows Spark got, plus `duplicates` the read tasks dropped
        before (pipeline/transforms/read_task_dedup.py)."""
        return replace(
            self, rows_in=self.rows_in + duplicates, duplicates=self.duplicates + duplicates
        )


@dataclass(frozen=True)
class TransformResult:
    """Rows to write (`df`), rows rejected (`rejected_df`, REJECTED_ROW_SCHEMA), counts."""

    df: DataFrame
    observation: Observation
    # Builds `rejected_df`: most runs never read it (on_error fail with nothing rejected),
    # and building it is a projection for the JVM to analyze.
    build_rejected: Callable[[], DataFrame]

    @cached_property
    def rejected_df(self) -> DataFrame:
        return self.build_rejected()

    def counts(self, timeout_s: float = OBSERVATION_TIMEOUT_S) -> TransformCounts:
        """The counts, once an action has read the whole of `df` or `rejected_df` (the
        write, `run_checks`' row count): Spark fills them just after that action ends, so
        this waits up to `timeout_s` for them. A fate no step of the chain can give was not
        counted: it is 0; the rows out are the rows in less every other fate."""
        observed = observed_metrics(self.observation, timeout_s, what="the transform stage")
        rows_in = int(observed["rows_in"])
        fates = {name: int(observed.get(name) or 0) for name in _FATE_COUNTS}
        return TransformCounts(rows_in=rows_in, rows_out=rows_in - sum(fates.values()), **fates)


# The count of each fate, by the name TransformCounts gives it.
_FATE_COUNTS = {"filtered": FILTERED, "duplicates": DUPLICATE, "rejected": REJECTED}


SaltFor = Callable[[MaskStep], SecretStr | None]


def step_salt(step: MaskStep) -> SecretStr | None:
    return step.salt


def _col(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col(quote_ident(name))


@dataclass(frozen=True)
class _Context:
    spark: SparkSession
    salt_for: SaltFor
    step_index: int
    # Upsert batches: true on tombstones (key columns only). A delete must reach the MERGE,
    # so filters and dedup never drop one; the projections (mask, rename, ...) apply.
    tombstone: Column | None = None
    # Columns a mask of the chain hides, as named at this step: a rejected row's reason
    # never quotes a value computed from them.
    hidden: frozenset[str] = frozenset()

    def shows(self, expression: str) -> bool:
        """Whether a value of `expression` may be quoted in a reason (it reads no hidden
        column)."""
        if not self.hidden:
            return True
        read = referenced_columns(parse_expression(expression, what="transform"))
        return not {name.lower() for name in read} & {name.lower() for name in self.hidden}

    def not_tombstone(self) -> Column:
        from pyspark.sql import functions as F

        return F.lit(True) if self.tombstone is None else ~self.tombstone


def _kept() -> Column:
    return _col(FATE_COLUMN).isNull()


def _set_fate(
    df: DataFrame, condition: Column, fate: str, error: Column | None = None
) -> DataFrame:
    """Give rows still kept that meet `condition` the fate `fate` (first fate wins)."""
    from pyspark.sql import functions as F

    hit = _kept() & condition
    updates = {FATE_COLUMN: F.when(hit, F.lit(fate)).otherwise(_col(FATE_COLUMN))}
    if error is not None:
        updates[ERROR_COLUMN] = F.when(hit, error).otherwise(_col(ERROR_COLUMN))
    # One projection: `hit` must be evaluated against the fate before this step.
    return df.withColumns(updates)


def _hash_column(value: Column, salt: Column) -> Column:
    """hex(SHA-256(salt || value as a UTF-8 string)); null stays null."""
    from pyspark.sql import functions as F

    return F.sha2(F.concat(salt, value.cast("string")), 256)


@contextmanager
def _salt_value(ctx: _Context, salt: SecretStr) -> Iterator[Column]:
    """The salt as a scalar subquery over a one-row local relation, valid while the
    context is open (the relation's temporary view is dropped on exit; DataFrames built
    inside keep their resolved plan).

    Never a literal: literals appear in query plans, explain output and Spark event logs;
    plans show the subquery and the relation's column, not its value. Built from pandas
    so that Spark makes it a local relation (`mapInArrow`, which decode runs on, imports
    pandas already): the subquery is then evaluated on the driver without a Spark job,
    and each row pays a constant instead of a join (measured: the broadcast cross join
    used before ran one Spark job with Python workers per query and cost about 0.5 CPU-s
    per 1M rows more than the constant).
    """
    import uuid

    import pandas as pd
    from pyspark.sql import functions as F

    column = f"{SALT_COLUMN_PREFIX}{ctx.step_index}"
    view = f"{SALT_COLUMN_PREFIX}{uuid.uuid4().hex}"
    relation = pd.DataFrame({column: [salt.get_secret_value()]})
    ctx.spark.createDataFrame(relation, f"`{column}` string").createOrReplaceTempView(view)
    try:
        yield F.expr(f"(SELECT `{column}` FROM `{view}`)")
    finally:
        ctx.spark.catalog.dropTempView(view)


def _run_mask(step: MaskStep, df: DataFrame, ctx: _Context) -> DataFrame:
    from pyspark.sql import functions as F

    if step.method == "hash":
        salt = ctx.salt_for(step)
        if salt is None:
            raise ValueError(f"{step.key}: mask method hash has no salt")
        with _salt_value(ctx, salt) as salt_value:
            return df.withColumns(
                {column: _hash_column(_col(column), salt_value) for column in step.columns}
            )
    if step.method == "redact":
        for column in step.columns:
            value = F.when(_col(column).isNull(), F.lit(None)).otherwise(F.lit(step.replacement))
            df = df.withColumn(column, value.cast("string"))
        return df
    for column in step.columns:
        df = df.withColumn(column, partial_mask(_col(column), step.keep_first, step.keep_last))
    return df


def partial_mask(value: Column, keep_first: int, keep_last: int) -> Column:
    """Keep the first/last characters and star the rest. A value no longer than what
    would be kept is starred entirely: a short value is never shown in full."""
    from pyspark.sql import functions as F

    text = value.cast("string")
    length = F.length(text)
    kept = keep_first + keep_last
    head = F.substring(text, 1, keep_first) if keep_first > 0 else F.lit("")
    # substring(s, -n, n) is the last n characters.
    tail = F.substring(text, -keep_last, keep_last) if keep_last > 0 else F.lit("")
    return (
        F.when(text.isNull(), F.lit(None).cast("string"))
        .when(length <= F.lit(kept), _stars(length))
        .otherwise(F.concat(head, _stars(length - F.lit(kept)), tail))
    )


def _stars(count: Column) -> Column:
    from pyspark.sql import functions as F

    return F.call_function("repeat", F.lit("*"), count)


def _run_dedup(step: DedupStep, df: DataFrame, ctx: _Context) -> DataFrame:
    """Keep one row per key: the first or last by (partition, offset).

    One shuffle and sort of the batch by key (measured against a variant that shuffles
    only the keys and ranks only the rows of repeated keys: the extra joins and passes
    made it twice as slow on 1M rows with no duplicates).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = [_col(SOURCE_PARTITION_COLUMN), _col(SOURCE_OFFSET_COLUMN)]
    if step.keep == "last":
        order = [c.desc() for c in order]
    # Rows already filtered out or rejected sit in their own window partitions (fate is
    # part of the partition key), so they never win over a kept row.
    # Tombstones likewise (they are never duplicates: each delete goes to the MERGE).
    partition = [*[_col(k) for k in step.keys], _col(FATE_COLUMN)]
    if ctx.tombstone is not None:
        partition.append(ctx.tombstone)
    window = Window.partitionBy(*partition).orderBy(*order)
    # The rank inside the fate's expression: Spark computes it in a Window operator all
    # the same, and the frame is one projection to analyze instead of three (add the
    # rank, set the fate, drop the rank).
    return _set_fate(df, (F.row_number().over(window) > 1) & ctx.not_tombstone(), DUPLICATE)


def _run_filter(step: FilterStep, df: DataFrame, ctx: _Context) -> DataFrame:
    from pyspark.sql import functions as F

    failure = _cast_failure(step.cast_checks, f"{step.key} filter", ctx)
    if step.cast_checks:
        df = _set_fate(df, failure.isNotNull() & ctx.not_tombstone(), REJECTED, failure)
    # Like Spark's filter: a NULL predicate does not keep the row.
    keep = F.coalesce(F.expr(step.where), F.lit(False))
    return _set_fate(df, ~keep & ctx.not_tombstone(), FILTERED)


def _run_derive(step: DeriveStep, df: DataFrame, ctx: _Context) -> DataFrame:
    from pyspark.sql import functions as F

    raw = "__tf_raw"
    failure = "__tf_cast_failure"
    # Both are computed from the columns before the derived one replaces any of them.
    df = df.withColumns(
        {
            raw: F.expr(step.value_expression),
            failure: _cast_failure(step.cast_checks, f"{step.key} derive {step.column}", ctx),
        }
    )
    typed = F.expr(f"try_cast(`{raw}` AS {step.spark_type})")
    df = df.withColumn(step.column, typed)
    misfit = _col(raw).isNotNull() & _col(step.column).isNull()
    shown = ctx.shows(step.value_expression) and step.column.lower() not in {
        name.lower() for name in ctx.hidden
    }
    value = F.substring(_col(raw).cast("string"), 1, 200) if shown else F.lit(MASKED_VALUE)
    message = F.concat(
        F.lit(f"{step.key} derive {step.column}: value "),
        value,
        F.lit(f" does not fit the planned type {step.spark_type}"),
    )
    failed = _col(failure).isNotNull()
    rejected = (failed | misfit) & ctx.not_tombstone()
    df = _set_fate(df, rejected, REJECTED, F.coalesce(_col(failure), message))
    return df.drop(raw, failure)


def _cast_failure(checks: tuple[CastCheck, ...], where: str, ctx: _Context) -> Column:
    """Why a plain CAST inside an expression failed on the row (its message), else NULL.
    The value is quoted unless it is read from a masked column."""
    from pyspark.sql import functions as F

    failure = F.lit(None).cast("string")
    for check in reversed(checks):  # the first failing cast names the row's error
        value = (
            F.substring(F.expr(check.operand).cast("string"), 1, 200)
            if ctx.shows(check.operand)
            else F.lit(MASKED_VALUE)
        )
        message = F.concat(
            F.lit(f"{where}: {check.cast} failed on value "),
            value,
            F.lit(" (a failing CAST gives NULL; write TRY_CAST to accept that)"),
        )
        failure = F.when(F.expr(check.failed), message).otherwise(failure)
    return failure


def _run_rename(step: RenameStep, df: DataFrame, ctx: _Context) -> DataFrame:
    for old, new in step.renames:
        df = df.withColumnRenamed(old, new)
    return df


def _run_drop(step: DropStep, df: DataFrame, ctx: _Context) -> DataFrame:
    return df.drop(*step.columns)


_RUNNERS: dict[type, Callable[[Any, DataFrame, _Context], DataFrame]] = {
    MaskStep: _run_mask,
    DedupStep: _run_dedup,
    FilterStep: _run_filter,
    DeriveStep: _run_derive,
    RenameStep: _run_rename,
    DropStep: _run_drop,
}


def possible_fates(steps: Sequence[TransformStep]) -> frozenset[str]:
    """The fates the steps can give a row (a mask, rename or drop gives none)."""
    fates: set[str] = set()
    for step in steps:
        fates |= _FATES_OF.get(type(step), lambda _: frozenset())(step)
    return frozenset(fates)


_FATES_OF: dict[type, Callable[[Any], frozenset[str]]] = {
    # A plain CAST that fails in a filter rejects the row.
    FilterStep: lambda step: frozenset({FILTERED, REJECTED} if step.cast_checks else {FILTERED}),
    DedupStep: lambda step: frozenset({DUPLICATE}),
    # A derived value that does not fit its planned type is rejected.
    DeriveStep: lambda step: frozenset({REJECTED}),
}


def _check_input(df: DataFrame, compiled: CompiledTransforms) -> None:
    missing = [c for c in (*compiled.input_schema.names, *HIDDEN_COLUMNS) if c not in df.columns]
    if missing:
        raise ValueError(f"the batch lacks columns the transforms were compiled for: {missing}")


def apply_transforms(
    df: DataFrame,
    compiled: CompiledTransforms,
    *,
    spark: SparkSession,
    salt_for: SaltFor = step_salt,
) -> TransformResult:
    """Run `compiled` on `df` (lazily; counted by an observation during the first action)."""
    from pyspark.sql import functions as F

    _check_input(df, compiled)
    no_text = F.lit(None).cast("string")
    tagged = df.withColumns({FATE_COLUMN: no_text, ERROR_COLUMN: no_text})
    tombstone = _col(TOMBSTONE_COLUMN) if TOMBSTONE_COLUMN in df.columns else None
    for index, step in enumerate(execution_order(compiled.steps)):
        context = _Context(
            spark=spark,
            salt_for=salt_for,
            step_index=index,
            tombstone=tombstone,
            hidden=compiled.sensitive_columns(step),
        )
        tagged = _RUNNERS[type(step)](step, tagged, context)
    fate = _col(FATE_COLUMN)
    # Each count is an aggregate evaluated on every row: only the fates the chain can give
    # are counted, and the rows out are the rows in less those (`TransformResult.counts`).
    possible = possible_fates(compiled.steps)
    fate_column = quote_ident(FATE_COLUMN)
    counts = {"rows_in": "count(1)"} | {
        name: f"count(CASE WHEN {fate_column} = {sql_string(value)} THEN 1 END)"
        for name, value in _FATE_COUNTS.items()
        if value in possible
    }
    tagged, observation = observe_counts(tagged, "transforms", counts)
    output_columns = [*compiled.output_schema.names, *HIDDEN_COLUMNS]
    if tombstone is None:
        kept = tagged.filter(fate.isNull()).select(*[_col(c) for c in output_columns])
    else:
        kept = _upsert_rows(tagged, output_columns)

    def rejected() -> DataFrame:
        return rejected_rows(
            tagged.filter(fate == F.lit(REJECTED)),
            stage=TRANSFORM_STAGE,
            error_class=F.lit(REJECT_ERROR_CLASS),
            error_message=_col(ERROR_COLUMN),
            row=row_json(compiled.output_schema.names),
        )

    return TransformResult(df=kept, observation=observation, build_rejected=rejected)


def _upsert_rows(tagged: DataFrame, columns: list[str]) -> DataFrame:
    """The rows an upsert table's write gets: the kept ones and tombstones, and the rows a
    filter took out, as retractions: the delete of their key when one is the key's latest
    record (Flink's upsert semantics: the key's latest state is "filtered", no row).
    They are counted as filtered, not as written or as tombstones."""
    from pyspark.sql import functions as F

    fate = _col(FATE_COLUMN)
    retraction = fate.isNotNull() & (fate == F.lit(FILTERED))
    hidden = [c for c in (SOURCE_TIMESTAMP_COLUMN,) if c in tagged.columns]
    return tagged.filter(fate.isNull() | retraction).select(
        *[_col(c) for c in (*columns, *hidden)],
        (_col(TOMBSTONE_COLUMN) | retraction).alias(TOMBSTONE_COLUMN),
        retraction.alias(RETRACTION_COLUMN),
    )


def rejected_rows(
    df: DataFrame,
    *,
    stage: str,
    error_class: Column,
    error_message: Column,
    row: Column | None = None,
) -> DataFrame:
    """Rows of `df` as REJECTED_ROW_SCHEMA (source position and why), plus `row` as
    ROW_JSON_COLUMN when given: computed only if a dead-letter target keeps it (payload
    `masked`), Spark prunes it otherwise."""
    from pyspark.sql import functions as F

    columns = [
        _col(SOURCE_PARTITION_COLUMN).cast("int").alias("source_partition"),
        _col(SOURCE_OFFSET_COLUMN).cast("long").alias("source_offset"),
        F.lit(stage).alias("stage"),
        error_class.cast("string").alias("error_class"),
        error_message.cast("string").alias("error_message"),
    ]
    if row is not None:
        columns.append(row.alias(ROW_JSON_COLUMN))
    return df.select(*columns)


def row_json(columns: Sequence[str]) -> Column:
    """The row's `columns` (the table's, after the transforms: masked columns masked) as
    one JSON object."""
    from pyspark.sql import functions as F

    return F.to_json(F.struct(*[_col(c) for c in columns]))


def dedup_against_table(
    df: DataFrame,
    spark: SparkSession,
    table_identifier: str,
    keys: tuple[str, ...],
    *,
    snapshot_id: int | None = None,
) -> DataFrame:
    """Insert-if-absent for append tables: drop rows whose key is already in the table.

    A left anti join against the key columns of the table's current rows (Parquet column
    projection, no other columns read), null-safe: a NULL key matches a NULL key.
    Replaying a batch already written therefore writes nothing. On a new (empty) table
    Spark's adaptive execution drops the join: no job, no cost. On an existing table it
    costs one scan of the key columns per run and a hash join (a broadcast while the keys
    are small).

    One key is joined on plain equality, so a long or int key gets Spark's dense long hash
    relation, and rows with a NULL key are dropped apart if the table holds a NULL key;
    null-safe equality (`<=>`) would hash two generated keys per row (measured: 1M keys in
    the table cost 5.5 s of CPU that way). No DISTINCT on the table's keys: an anti join
    needs none, and the keys of a deduplicated table are distinct already.

    `snapshot_id`: the table as of that snapshot (the run's base), so the frame means the
    same rows when it is read again after the write (the checks' samples read it again).
    """
    table = spark.table(table_identifier)
    if snapshot_id is not None:
        reader = spark.read.format("iceberg").option("snapshot-id", str(snapshot_id))
        table = reader.load(table_identifier)
    if len(keys) == 1:
        return _absent_from_table(df, table, keys[0])
    existing = table.select(*[_col(k) for k in keys])
    aliased = existing.select(*[_col(k).alias(f"__tf_existing_{i}") for i, k in enumerate(keys)])
    condition = None
    for i, key in enumerate(keys):
        term = _col(key).eqNullSafe(_col(f"__tf_existing_{i}"))
        condition = term if condition is None else condition & term
    return df.join(aliased, on=condition, how="left_anti")


def drop_rows_held(
    df: DataFrame,
    spark: SparkSession,
    keys: tuple[str, ...],
    held: Callable[[pa.Table], np.ndarray],
    cleanups: list[Callable[[], None]],
) -> DataFrame:
    """Insert-if-absent answered on the driver: `df` is cached (unpersisted by
    `cleanups`), its rows' key columns and source positions collected (the batch's only,
    whatever the table's size), `held(rows)` says which rows' keys the table holds
    (pipeline/dedup_index.py), and those rows, named by their (partition, offset), are
    anti-joined away with a broadcast of just them. Nothing held: `df` as it is."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    cached = df.persist()

    def release() -> None:
        cached.unpersist()

    cleanups.append(release)
    positions = [SOURCE_PARTITION_COLUMN, SOURCE_OFFSET_COLUMN]
    batches = cached.select(*[_col(c) for c in (*keys, *positions)])._collect_as_arrow()
    if not batches:
        return cached
    rows = pa.Table.from_batches(batches)
    in_table = held(rows)
    if not in_table.any():
        return cached
    dropped = rows.filter(pa.array(in_table)).select(positions).to_pandas()
    known = spark.createDataFrame(dropped)
    return cached.join(F.broadcast(known), on=positions, how="left_anti")


def _absent_from_table(df: DataFrame, table: DataFrame, key: str) -> DataFrame:
    from pyspark.sql import functions as F

    existing = "__tf_existing_0"
    known = table.select(_col(key).alias(existing)).where(_col(existing).isNotNull())
    absent = df.join(known, on=_col(key) == _col(existing), how="left_anti")
    # At most one row: whether the table holds a NULL key (files without one are pruned
    # by their null counts). The condition names the batch's side only: a row with a NULL
    # key is dropped when that row exists.
    null_key = table.where(_col(key).isNull()).select(F.lit(True).alias("__tf_null_key")).limit(1)
    return absent.join(null_key, on=_col(key).isNull(), how="left_anti")


def align_to_table(df: DataFrame, table: StructType) -> DataFrame:
    """`df` with every column (and struct field) of the table it is written to.

    The transforms build their output from the topic's current schema; a field the topic's
    schema no longer has, passed through untouched, keeps its column in the table (as on a
    table without transforms: optional, new rows hold null), and Spark's Iceberg writer
    needs data for every table column. Columns and struct fields the table has and `df`
    lacks are added as typed NULLs; everything else is left as it is (the writer still
    refuses what does not fit), including structs inside arrays and map values.
    """
    from pyspark.sql import functions as F

    have = {f.name: f.dataType for f in df.schema.fields}
    updates: dict[str, Column] = {}
    for field in table.fields:
        if field.name not in have:
            updates[field.name] = F.lit(None).cast(field.dataType)
        else:
            aligned = _aligned(_col(field.name), have[field.name], field.dataType)
            if aligned is not None:
                updates[field.name] = aligned
    return df.withColumns(updates) if updates else df


def _aligned(value: Column, have: DataType, want: DataType) -> Column | None:
    """`value` with the struct fields `want` has and `have` lacks, or None if none lack."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(have, ArrayType) and isinstance(want, ArrayType):
        return _aligned_elements(
            have.elementType, want.elementType, lambda align: F.transform(value, align)
        )
    if isinstance(have, MapType) and isinstance(want, MapType):
        return _aligned_elements(
            have.valueType,
            want.valueType,
            lambda align: F.transform_values(value, lambda _key, element: align(element)),
        )
    if not (isinstance(have, StructType) and isinstance(want, StructType)):
        return None
    present = {f.name: f.dataType for f in have.fields}
    members: list[Column] = []
    changed = False
    for field in want.fields:
        if field.name not in present:
            members.append(F.lit(None).cast(field.dataType).alias(field.name))
            changed = True
            continue
        inner = _aligned(value.getField(field.name), present[field.name], field.dataType)
        changed = changed or inner is not None
        member = inner if inner is not None else value.getField(field.name)
        members.append(member.alias(field.name))
    wanted = {f.name for f in want.fields}
    # Fields only `df` has stay (the writer refuses them rather than losing them here).
    members.extend(value.getField(n).alias(n) for n in present if n not in wanted)
    if not changed:
        return None
    return F.when(value.isNull(), F.lit(None)).otherwise(F.struct(*members))


def _aligned_elements(
    have: DataType, want: DataType, apply: Callable[[Callable[[Column], Column]], Column]
) -> Column | None:
    """An array's elements or a map's values aligned by `apply` (which maps a function over
    them), or None if no element needs it."""
    from pyspark.sql.functions import col

    if _aligned(col("element"), have, want) is None:  # nothing to add: leave the column
        return None

    def align(element: Column) -> Column:
        aligned = _aligned(element, have, want)
        assert aligned is not None
        return aligned

    return apply(align)
