"""A table of many rows built directly (pyarrow + pyiceberg), as if `tableflow apply` had
loaded it from its topic: benchmarks/upsert.py's sizes above `--direct-above`.

Loading 100M records through Kafka would take the benchmark hours on two cores and
measure nothing the 1M size does not. Issue 45 allows building the large table directly
"with correct position columns and committed offsets". So:

1. tableflow creates its tables itself (`tableflow apply` on the still-empty topic: the
   table, its properties, an upsert table's deletes table);
2. the topic gets one **placeholder** record per row, a producer per partition: the
   row's Kafka key (Avro {id}), and an **empty value**, which no decoder accepts (no
   Confluent header). Row `id` sits at partition `id % 4`, offset `id // 4`, as a keyed
   producer's first load leaves it. tableflow never reads them, since the table's
   committed offsets are past them; if it did (a wrong offset), every one would be a bad
   record and the apply would fail, not land a row;
3. the rows (`upsert.initial_rows_range`: `record(id)`, the same values the topic's
   records would hold) are written as data files of each table with tableflow's own
   writer (`pipeline.data_files.write_data_files`), the upsert table's order columns set
   from the row's position (partition, offset, and the placeholder's CreateTime), and
   committed in one fast append whose snapshot carries `tableflow.offsets` (the
   placeholders' end offsets): what tableflow's publish commit leaves.

The batches that follow are real Avro records after the placeholders, read by
`tableflow apply` as any batch.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Producer
from repo_root import ROOT  # noqa: F401  (tests.support below)

from tableflow_core.dev import broker
from tableflow_core.ingest.upsert_order import OFFSET_COLUMN, PARTITION_COLUMN, TIMESTAMP_COLUMN
from tableflow_core.pipeline.data_files import write_data_files
from tableflow_core.state.offsets import OFFSETS_KEY, encode_offsets
from tests.support.trino_server import TrinoIcebergCatalog, TrinoSettings, start_trino

# Rows written at a time: the writer splits them into files of the table's target size.
CHUNK_ROWS = 10_000_000
PRODUCE_CHUNK = 100_000


def rows_in_partition(rows: int, partition: int, partitions: int) -> int:
    """How many of ids 0..rows-1 sit in `partition` (id % partitions)."""
    return len(range(partition, rows, partitions))


def _produce_placeholders(
    bootstrap: str, topic: str, partition: int, partitions: int, rows: int, key_header: bytes
) -> None:
    # imported here: upsert imports this module (benchmarks/ is on the child's sys.path)
    from upsert import avro_long, produce_messages

    producer = Producer(broker.producer_config(bootstrap, **{"linger.ms": 100}))
    ids = range(partition, rows, partitions)
    for start in range(0, len(ids), PRODUCE_CHUNK):
        chunk = ids[start : start + PRODUCE_CHUNK]
        messages = [{"key": key_header + avro_long(i), "value": b""} for i in chunk]
        produce_messages(producer, topic, partition, messages)
    remaining = producer.flush(600)
    assert remaining == 0, f"{remaining} placeholder records not delivered"


def produce_placeholders(
    bootstrap: str, topic: str, partitions: int, rows: int, key_header: bytes
) -> float:
    """One placeholder record per id 0..rows-1 (see the module's doc), a producer process
    per partition; wall seconds."""
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    args = [(bootstrap, topic, p, partitions, rows, key_header) for p in range(partitions)]
    with context.Pool(min(partitions, os.cpu_count() or 1)) as pool:
        pool.starmap(_produce_placeholders, args)
    return time.perf_counter() - started


def _with_order_columns(
    chunk: pa.Table, ids: np.ndarray, partitions: int, created_ms: int, schema: pa.Schema
) -> pa.Table:
    """`chunk` with the table's columns in the table's order: an upsert table's order
    columns from each row's position."""
    columns: dict[str, Any] = {}
    for field in schema:
        if field.name in chunk.column_names:
            columns[field.name] = chunk[field.name].cast(field.type)
        elif field.name == PARTITION_COLUMN:
            columns[field.name] = pa.array((ids % partitions).astype(np.int32), field.type)
        elif field.name == OFFSET_COLUMN:
            columns[field.name] = pa.array(ids // partitions, field.type)
        elif field.name == TIMESTAMP_COLUMN:
            stamps = pa.array(np.full(len(ids), created_ms * 1000, dtype=np.int64), pa.int64())
            columns[field.name] = stamps.cast(field.type)
        else:
            raise ValueError(f"the benchmark cannot fill the table's column {field.name!r}")
    return pa.table(columns, schema=schema)


def build_tables(
    catalog: Any,
    identifiers: Sequence[str],
    topic: str,
    partitions: int,
    rows: int,
    created_ms: int,
    chunk_rows: Callable[[int, int], pa.Table],
) -> float:
    """Write ids 0..rows-1 (`chunk_rows(start, stop)` gives their Arrow rows) into each of
    `identifiers` (tables tableflow created) and commit each in one fast append carrying
    the placeholders' end offsets; wall seconds."""
    started = time.perf_counter()
    tables = [catalog.load_table(i) for i in identifiers]
    files: list[list[Any]] = [[] for _ in tables]
    for start in range(0, rows, CHUNK_ROWS):
        stop = min(rows, start + CHUNK_ROWS)
        chunk = chunk_rows(start, stop)
        ids = np.arange(start, stop, dtype=np.int64)
        for n, table in enumerate(tables):
            schema = table.schema().as_arrow()
            rows_out = _with_order_columns(chunk, ids, partitions, created_ms, schema)
            files[n] += write_data_files(table.metadata, table.io.properties, rows_out)
    offsets = {p: rows_in_partition(rows, p, partitions) for p in range(partitions)}
    summary = {OFFSETS_KEY: encode_offsets(topic, offsets)}
    for table, data_files in zip(tables, files, strict=True):
        with (
            table.transaction() as tx,
            tx.update_snapshot(snapshot_properties=summary).fast_append() as append,
        ):
            for data_file in data_files:
                append.append_data_file(data_file)
    return time.perf_counter() - started


# What every reader computes of a table, and the models: (rows, sum of amounts in
# quarters, sum over rows of (id % 97 + 1) * amount in quarters). Amounts are multiples
# of 0.25, so every figure is an exact integer, whatever order a reader adds in; the
# third tells apart tables whose rows hold the same amounts under other ids.
Figures = tuple[int, int, int]
FINGERPRINT_MOD = 97


def _row_print(key: int, amount: float) -> tuple[int, int]:
    quarters = round(amount * 4)
    return quarters, (key % FINGERPRINT_MOD + 1) * quarters


def _initial_figures(rows: int) -> Figures:
    """The figures of ids 0..rows-1 with amount id * 0.25 (quarters: id)."""
    printed = 0
    for start in range(0, rows, CHUNK_ROWS):
        ids = np.arange(start, min(rows, start + CHUNK_ROWS), dtype=np.int64)
        printed += int(((ids % FINGERPRINT_MOD + 1) * ids).sum())
    return rows, rows * (rows - 1) // 2, printed


class UpsertModel:
    """What an upsert table on id holds: ids 0..rows-1 with `amount` id * 0.25, then each
    change in produce order (the last record of a key wins; a tombstone deletes)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.changed: dict[int, float | None] = {}

    def apply(self, changes: Iterable[tuple[int, dict[str, Any] | None]]) -> None:
        for key, value in changes:
            self.changed[key] = None if value is None else float(value["amount"])

    def figures(self) -> Figures:
        count, quarters, printed = _initial_figures(self.rows)
        for key, amount in self.changed.items():
            if key < self.rows:
                old = _row_print(key, key * 0.25)
                count, quarters, printed = count - 1, quarters - old[0], printed - old[1]
            if amount is not None:
                new = _row_print(key, amount)
                count, quarters, printed = count + 1, quarters + new[0], printed + new[1]
        return count, quarters, printed


class DedupModel:
    """What an append table with `dedup` on id (keep first) holds: ids 0..rows-1, then a
    key's first record that the table does not hold yet; tombstones are not rows."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.added: dict[int, float] = {}

    def apply(self, changes: Iterable[tuple[int, dict[str, Any] | None]]) -> None:
        for key, value in changes:
            if value is not None and key >= self.rows and key not in self.added:
                self.added[key] = float(value["amount"])

    def figures(self) -> Figures:
        count, quarters, printed = _initial_figures(self.rows)
        for key, amount in self.added.items():
            new = _row_print(key, amount)
            count, quarters, printed = count + 1, quarters + new[0], printed + new[1]
        return count, quarters, printed


def pyiceberg_figures_of(table: Any) -> Figures:
    """The figures of the table's current snapshot, read by pyiceberg."""
    arrow = table.scan(selected_fields=("id", "amount")).to_arrow()
    ids = arrow["id"].to_numpy()
    quarters = np.rint(arrow["amount"].to_numpy() * 4).astype(np.int64)
    return arrow.num_rows, int(quarters.sum()), int(((ids % FINGERPRINT_MOD + 1) * quarters).sum())


@contextlib.contextmanager
def trino_reader(handle: Any, work: Path) -> Iterator[Any]:
    """A Trino server (tests/support) whose catalog `tf` is the project's catalog
    (`handle`, served meanwhile); its file:// warehouse read through Hadoop's file system."""
    catalog = TrinoIcebergCatalog(
        name="tf",
        rest_uri=handle.catalog.properties["uri"],
        properties=(("fs.hadoop.enabled", "true"),),
    )
    server = start_trino(TrinoSettings(data_dir=work / "trino", catalogs=(catalog,), heap_mb=2048))
    try:
        yield server
    finally:
        server.stop()


SQL_FIGURES = (
    "SELECT count(*), sum(CAST(amount * 4 AS BIGINT)), "
    f"sum((id % {FINGERPRINT_MOD} + 1) * CAST(amount * 4 AS BIGINT)) FROM {{table}}"
)


def engine_figures(
    reader: str, metadata_location: str, spark: Any, spark_table: str, trino: Any
) -> Figures:
    """The figures of the table read by `reader`, with the same SQL: DuckDB (the snapshot
    of `metadata_location`), Spark (`spark_table`, refreshed) or Trino (catalog `tf`): the
    catalog's current snapshot, the same one while nothing commits."""
    from tableflow_core.readers.duckdb_reader import duckdb_connection

    if reader == "Trino":
        identifier = spark_table.split(".", 1)[1]
        (row,) = trino.query(SQL_FIGURES.format(table=f"tf.{identifier}"), timeout=1800)
    elif reader == "DuckDB":
        source = f"iceberg_scan('{metadata_location}')"
        row = duckdb_connection().execute(SQL_FIGURES.format(table=source)).fetchone()
    else:
        spark.sql(f"REFRESH TABLE {spark_table}")
        row = spark.sql(SQL_FIGURES.format(table=spark_table)).collect()[0]
    count, quarters, printed = row
    return int(count), int(quarters or 0), int(printed or 0)


def agree(label: str, figures: dict[str, Figures], model: Figures) -> str:
    """One line: every reader's figures equal to the model's (exact integers); raises
    naming the readers that differ."""
    wrong = {reader: got for reader, got in figures.items() if got != model}
    assert not wrong, f"{label}: readers differ from the model {model}: {wrong}"
    return (
        f"{label}: {', '.join(figures)} = model ({model[0]:,} rows, sum of amounts "
        f"{model[1] / 4:,.2f}, row print {model[2]:,})"
    )
