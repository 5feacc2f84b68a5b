"""Dead-lettering to an Iceberg table: a small batch appended by the driver, a large one
merged by Spark with the Iceberg runtime.

Up to `driver_max_rows()` rows (50,000 unless TABLEFLOW_DLQ_DRIVER_MAX_ROWS says) and when
the run gives the sink pyiceberg access to its catalog (`SinkContext.iceberg_tables`), the
driver collects the batch and appends the rows the table does not hold yet
(sinks/iceberg_driver_append.py): a scan and a commit, no Spark job beyond the collect.
Otherwise the write is Spark's: one MERGE INTO ... ON (source_topic, source_partition,
source_offset, stage) WHEN NOT MATCHED THEN INSERT *. A re-run after a crash between
this write and the table's publish routes the same records again and the MERGE adds
nothing for them. MERGE rather than an anti-join followed by an append: the check and
the insert are one statement and one commit, and when another writer commits in between
Iceberg's commit retry or our retry re-runs the match against the new snapshot, so two
writers never both insert the same record.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, ValidationException

from tableflow_core.config.models.dead_letter import IcebergDeadLetter
from tableflow_core.deadletter.errors import DeadLetterTableError
from tableflow_core.deadletter.frames import count_by_partition, spark_error_summary, spark_schema
from tableflow_core.deadletter.sinks.base import IcebergTables, SinkContext, SinkResult
from tableflow_core.deadletter.sinks.iceberg_driver_append import (
    APPEND_ATTEMPTS,
    append_new_rows,
    driver_max_rows,
)
from tableflow_core.ingest.bad_records import (
    BAD_RECORD_SCHEMA,
    DLQ_KEY_COLUMNS,
    dlq_properties,
    dlq_table_schema,
)
from tableflow_core.sql_text import quote_ident

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MERGE_ATTEMPTS = 4
RUN_ID_PROPERTY = "tableflow.dead-letter.run-id"  # in the summary of the driver's append
# Commit conflicts with a concurrent writer: safe to retry, the MERGE is idempotent.
_RETRYABLE = ("CommitFailedException", "ValidationException", "conflicting files")


def spark_identifier(catalog: str, identifier: str) -> str:
    parts = [catalog, *identifier.split(".")] if catalog else identifier.split(".")
    return ".".join(quote_ident(p) for p in parts)


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def create_dlq_table_sql(
    catalog: str, identifier: str, properties: Mapping[str, str] | None = None
) -> list[str]:
    """CREATE NAMESPACE / CREATE TABLE IF NOT EXISTS statements for a dead-letter table."""
    columns = ", ".join(
        f"{quote_ident(f.name)} {f.dataType.simpleString()}{'' if f.nullable else ' NOT NULL'}"
        for f in spark_schema(dlq_table_schema()).fields
    )
    namespace = spark_identifier(catalog, identifier.rsplit(".", 1)[0])
    props = {**(properties or dlq_properties(())), "write.merge.isolation-level": "snapshot"}
    table = spark_identifier(catalog, identifier)
    tblproperties = ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in sorted(props.items()))
    order = ", ".join(quote_ident(c) for c in DLQ_KEY_COLUMNS[:3])
    return [
        f"CREATE NAMESPACE IF NOT EXISTS {namespace}",
        f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING iceberg "
        f"TBLPROPERTIES ({tblproperties})",
        f"ALTER TABLE {table} WRITE ORDERED BY {order}",
    ]


def create_dlq_table(
    spark: SparkSession,
    catalog: str,
    identifier: str,
    properties: Mapping[str, str] | None = None,
) -> None:
    """Execute a plan's create-dead-letter-table action (see plan/dead_letter_table.py)."""
    for statement in create_dlq_table_sql(catalog, identifier, properties):
        spark.sql(statement)


def _collect_at_most(bad: DataFrame, rows: int) -> pa.Table | None:
    """`bad` on the driver as Arrow (BAD_RECORD_SCHEMA), or None when it has more than
    `rows` rows (Spark's MERGE writes it then)."""
    batches = bad.limit(rows + 1)._collect_as_arrow()
    collected = (
        pa.Table.from_batches(batches)
        if batches
        else pa.Table.from_pylist([], schema=BAD_RECORD_SCHEMA)
    )
    return collected.cast(BAD_RECORD_SCHEMA) if collected.num_rows <= rows else None


def merge_sql(target: str, source_view: str) -> str:
    on = " AND ".join(f"t.{quote_ident(c)} = s.{quote_ident(c)}" for c in DLQ_KEY_COLUMNS)
    return (
        f"MERGE INTO {target} AS t USING {quote_ident(source_view)} AS s ON {on} "
        "WHEN NOT MATCHED THEN INSERT *"
    )


@dataclass(frozen=True)
class IcebergTableSink:
    target: IcebergDeadLetter
    context: SinkContext

    @property
    def catalog(self) -> str:
        address = self.context.catalog_address
        name = repr(self.context.spark_catalog)
        return f"catalog {name} at {address}" if address else f"catalog {name}"

    @property
    def spark_target(self) -> str:
        return spark_identifier(self.context.spark_catalog, self.target.table)

    def write(self, bad: DataFrame) -> SinkResult:
        tables = self.context.iceberg_tables
        budget = driver_max_rows()
        if tables is not None and budget > 0:
            rows = _collect_at_most(bad, budget)  # one Spark job: the rows or "too many"
            if rows is not None:
                return self.append_rows(rows)
        per_partition = count_by_partition(bad)
        result = SinkResult("dead_lettered", self.destination, per_partition)
        if not per_partition:
            return result
        started = time.perf_counter()
        spark = bad.sparkSession
        self._check_table(spark)
        view = f"tableflow_dlq_{uuid.uuid4().hex}"
        bad.createOrReplaceTempView(view)
        try:
            self._merge(spark, merge_sql(self.spark_target, view))
        finally:
            spark.catalog.dropTempView(view)
        return replace(result, write_s=time.perf_counter() - started)

    @property
    def destination(self) -> str:
        return f"iceberg table {self.target.table}"

    def append_rows(self, rows: pa.Table) -> SinkResult:
        """`rows` (BAD_RECORD_SCHEMA, at most `driver_max_rows()`) appended by the driver,
        idempotently (sinks/iceberg_driver_append.py)."""
        tables = self.context.iceberg_tables
        if tables is None:
            raise DeadLetterTableError(
                f"table {self.context.table}: no catalog client to append dead letters with"
            )
        counted = rows.group_by("source_partition").aggregate([("source_partition", "count")])
        per_partition = dict(
            zip(
                counted["source_partition"].to_pylist(),
                counted["source_partition_count"].to_pylist(),
                strict=True,
            )
        )
        result = SinkResult("dead_lettered", self.destination, per_partition)
        if not per_partition:
            return result
        started = time.perf_counter()
        try:
            append_new_rows(
                lambda: self._load(tables),  # each attempt loads the table anew
                tables.write_data_files,
                rows,
                {RUN_ID_PROPERTY: self.context.run_id},
            )
        except DeadLetterTableError:
            raise
        except (CommitFailedException, ValidationException) as exc:
            raise DeadLetterTableError(
                f"table {self.context.table}: dead-letter table {self.target.table} "
                f"({self.catalog}) took other writers' rows for the same source offsets "
                f"{APPEND_ATTEMPTS} times while this run appended its {rows.num_rows} bad "
                f"record(s); nothing was published, run again: {exc}"
            ) from exc
        except Exception as exc:
            raise DeadLetterTableError(
                f"table {self.context.table}: writing bad records to dead-letter table "
                f"{self.target.table} ({self.catalog}) failed: "
                f"{type(exc).__name__}: {str(exc)[:400]}"
            ) from exc
        return replace(result, write_s=time.perf_counter() - started)

    def _load(self, tables: IcebergTables) -> Any:
        """The dead-letter table through pyiceberg, checked as `_check_table` does."""
        try:
            table = tables.load(self.target.table)
        except NoSuchTableError as exc:
            raise DeadLetterTableError(
                f"table {self.context.table}: dead-letter table {self.target.table} in "
                f"{self.catalog} does not exist (created by `tableflow apply`)"
            ) from exc
        except Exception as exc:
            raise DeadLetterTableError(
                f"table {self.context.table}: dead-letter table {self.target.table} in "
                f"{self.catalog} cannot be read: {type(exc).__name__}: {str(exc)[:400]}"
            ) from exc
        self._check_columns([f.name for f in table.schema().fields])
        return table

    def _check_table(self, spark: SparkSession) -> None:
        try:
            columns = spark.table(self.spark_target).columns
        except Exception as exc:
            missing = "TABLE_OR_VIEW_NOT_FOUND" in str(exc)
            hint = (
                " does not exist (created by `tableflow apply`)" if missing else " cannot be read"
            )
            raise DeadLetterTableError(
                f"table {self.context.table}: dead-letter table {self.target.table} in "
                f"{self.catalog}{hint}: {spark_error_summary(exc)}"
            ) from exc
        self._check_columns(columns)

    def _check_columns(self, columns: list[str]) -> None:
        wanted = dlq_table_schema().names
        if columns != wanted:
            raise DeadLetterTableError(
                f"dead-letter table {self.target.table} has columns {columns}, expected {wanted}"
            )

    def _merge(self, spark: SparkSession, statement: str) -> None:
        for attempt in range(1, MERGE_ATTEMPTS + 1):
            try:
                spark.sql(statement)
                return
            except Exception as exc:
                text = str(exc)
                if attempt < MERGE_ATTEMPTS and any(s in text for s in _RETRYABLE):
                    time.sleep(0.2 * attempt)
                    continue
                raise DeadLetterTableError(
                    f"table {self.context.table}: writing bad records to dead-letter table "
                    f"{self.target.table} ({self.catalog}) failed: {spark_error_summary(exc)}"
                ) from exc
