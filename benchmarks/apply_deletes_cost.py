"""What applying an upsert table's position deletes costs: the driver's rewrite
(pipeline/apply_deletes.py, what `tableflow maintain` runs) against Spark's
`rewrite_data_files` (delete-file-threshold 1, dangling deletes removed: the fallback and
what ran before), on the same files, in the same run.

    .venv/bin/python benchmarks/apply_deletes_cost.py [--rows 1000000,10000000] [--deleted 0.1]

Per size: a table of `--rows` rows (benchmarks/upsert.py's `record(id)` columns plus the
upsert order columns) is built directly in a project's embedded catalog with tableflow's
writer, a data file per `--file-rows`; then `--delete-batches` row deltas each delete a
random share of every data file's rows (`--deleted` in all), a position delete file per
data file per batch, as upsert batches of random keys leave them. Then:

1. the driver's rewrite, with a warm key index of the table to remap (built before, not
   timed): wall and CPU seconds of this process (pyarrow's threads included). Its wall
   time is how long the table's lock is held: what an ingest of the table waits for;
2. main is set back to the snapshot before it, and Spark rewrites the same files:
   wall and CPU seconds of the process tree (driver + JVM);
3. both results read by DuckDB: the same rows, count and sum of ids, as the model says.

A first round at `--warmup-rows` is not counted: Spark's first procedure call of the
session pays the JVM's warm-up (33 CPU s for 1M rows, against ~7 warm).

The last lines: `driver/Spark CPU at N rows: X.XXx` per size.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from ingest import write_project
from upsert import initial_rows_range, tree_cpu

from tableflow_core.ingest.upsert_order import OFFSET_COLUMN, PARTITION_COLUMN, TIMESTAMP_COLUMN

NAMESPACE, NAME = "bench", "events"


def rows_with_positions(start: int, stop: int) -> pa.Table:
    rows = initial_rows_range(start, stop)
    ids = rows.column("id").to_numpy()
    return (
        rows.append_column(TIMESTAMP_COLUMN, rows.column("at"))
        .append_column(PARTITION_COLUMN, pa.array(ids % 4, pa.int32()))
        .append_column(OFFSET_COLUMN, pa.array(ids // 4, pa.int64()))
    )


def build(catalog: Any, rows: int, file_rows: int) -> Any:
    from tableflow_core.pipeline.data_files import write_data_files

    schema = rows_with_positions(0, 100).schema
    if catalog.table_exists((NAMESPACE, NAME)):
        catalog.purge_table((NAMESPACE, NAME))
    table = catalog.create_table((NAMESPACE, NAME), schema, properties={"format-version": "2"})
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for start in range(0, rows, file_rows):
            chunk = rows_with_positions(start, min(rows, start + file_rows))
            for data_file in write_data_files(tx.table_metadata, table.io.properties, chunk):
                append.append_data_file(data_file)
    return catalog.load_table((NAMESPACE, NAME))


def delete_batches(catalog: Any, share: float, batches: int, seed: int) -> int:
    """`batches` row deltas, each deleting share/batches of every data file's rows not yet
    deleted; the rows deleted in all."""
    from tableflow_core.engine.row_delta import RowDelta
    from tableflow_core.pipeline.upsert_rows import write_position_deletes

    rng = np.random.default_rng(seed)
    table = catalog.load_table((NAMESPACE, NAME))
    files = [t.file for t in table.scan().plan_files()]
    left = {f.file_path: np.arange(f.record_count) for f in files}
    deleted = 0
    for _ in range(batches):
        written = []
        for data_file in files:
            live = left[data_file.file_path]
            take = rng.choice(
                len(live), int(data_file.record_count * share / batches), replace=False
            )
            positions = live[take]
            left[data_file.file_path] = np.delete(live, take)
            written.append(
                write_position_deletes(table.io, table.location(), data_file.file_path, positions)
            )
            deleted += len(positions)
        with table.transaction() as tx, RowDelta(tx, table.io, written, {}, "main"):
            pass
        table = catalog.load_table((NAMESPACE, NAME))
    return deleted


def warm_index(table: Any) -> None:
    """The table's key index built and kept, as a `tableflow run` between batches holds it."""
    from tableflow_core.pipeline.key_index import INDEXES, KeyCodec
    from tableflow_core.pipeline.upsert_rows import _Scan

    snapshot = table.metadata.current_snapshot_id
    latest = rows_with_positions(0, 100)
    scan = _Scan(table, snapshot, latest, ("id",), False)
    index = scan.build_index()
    assert index.codec == KeyCodec((pa.int64(),))
    INDEXES.keep((str(table.metadata.table_uuid), ("id",)), index)


def checked(con: Any, table: Any, snapshot_id: int) -> tuple[int, int]:
    sql = (f"SELECT count(*), sum(id) FROM iceberg_scan('{table.metadata_location}', "
           f"snapshot_from_id => {snapshot_id})")  # fmt: skip
    count, total = con.execute(sql).fetchone()
    return int(count), int(total)


def measure(project: Path, spark: Any, rows: int, args: argparse.Namespace) -> float:
    from tableflow_core.config.loader import load_project
    from tableflow_core.engine.spark_session import register_catalog
    from tableflow_core.pipeline.apply_deletes import apply_deletes
    from tableflow_core.pipeline.key_index import INDEXES
    from tableflow_core.readers.duckdb_reader import duckdb_connection
    from tableflow_core.targets.catalog import open_catalog

    con = duckdb_connection()
    with open_catalog(load_project(project)) as handle:
        catalog = handle.catalog
        if not catalog.namespace_exists(NAMESPACE):
            catalog.create_namespace(NAMESPACE)
        started = time.perf_counter()
        table = build(catalog, rows, args.file_rows)
        deleted = delete_batches(catalog, args.deleted, args.delete_batches, seed=rows)
        table = catalog.load_table((NAMESPACE, NAME))
        base = table.metadata.current_snapshot()
        print(f"{rows:,} rows: {len(list(table.scan().plan_files()))} data files, "
              f"{base.summary['total-delete-files']} delete files, {deleted:,} rows deleted; "
              f"built in {time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip
        INDEXES.clear()
        warm_index(table)
        load = os.getloadavg()[0]
        wall, cpu = time.perf_counter(), time.process_time()
        driver = apply_deletes(table)
        driver_wall, driver_cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert driver.index_remapped
        INDEXES.clear()
        table = catalog.load_table((NAMESPACE, NAME))
        by_driver = checked(con, table, driver.snapshot_id)
        with table.manage_snapshots() as refs:  # main back before the rewrite
            refs.create_branch(base.snapshot_id, "main")
        name = f"bench_{handle.spark_name}_{rows}"
        register_catalog(spark, name, handle.spark_properties)
        before = tree_cpu(os.getpid())
        wall = time.perf_counter()
        spark.sql(
            f"CALL {name}.system.rewrite_data_files(table => '{NAMESPACE}.{NAME}', options => "
            "map('delete-file-threshold', '1', 'remove-dangling-deletes', 'true', "
            "'use-starting-sequence-number', 'false'))"
        ).collect()
        spark_wall = time.perf_counter() - wall
        after = tree_cpu(os.getpid())
        spark_cpu = sum(after[k] - before[k] for k in ("driver", "jvm", "workers"))
        table = catalog.load_table((NAMESPACE, NAME))
        by_spark = checked(con, table, table.metadata.current_snapshot_id)
        expected = (rows - deleted, None)
        assert by_driver == by_spark and by_driver[0] == expected[0], (by_driver, by_spark)
        print(f"{rows:,} rows: driver rewrite {driver_wall:.2f} s wall, {driver_cpu:.2f} s CPU "
              f"({len(driver.files)} files, index remapped; the lock held as long); Spark "
              f"rewrite_data_files {spark_wall:.2f} s wall, {spark_cpu:.2f} s CPU; both "
              f"{by_driver[0]:,} rows, equal sums; load average {load:.2f} -> "
              f"{os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
        return driver_cpu / spark_cpu


def main() -> None:
    from tableflow_core.engine.spark_session import build_spark_session

    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="1000000,10000000")
    parser.add_argument("--file-rows", type=int, default=1_000_000)
    parser.add_argument("--deleted", type=float, default=0.1)
    parser.add_argument("--delete-batches", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--warmup-rows", type=int, default=200_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tf-apply-deletes-"))
    project = write_project(work / "p", "127.0.0.1:9", "http://127.0.0.1:9", "unused", args.cores)
    spark = build_spark_session(f"local[{args.cores}]", "tableflow-bench")
    ratios = {}
    try:
        if args.warmup_rows:  # Spark's first procedure call pays the JVM's warm-up
            print("warm-up (not counted):", flush=True)
            measure(project, spark, args.warmup_rows, args)
        for rows in (int(r) for r in args.rows.split(",")):
            ratios[rows] = measure(project, spark, rows, args)
    finally:
        spark.stop()
    for rows, ratio in ratios.items():
        print(f"driver/Spark CPU at {rows:,} rows: {ratio:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
