"""Design study (issue 31): an upsert batch applied merge-on-read without Spark SQL.

    .venv/bin/python benchmarks/upsert_row_delta.py [--rows 1000000,10000000] [--batch 100000]
        [--batches 3] [--file-rows 1250000] [--key-only] [--catalog sqlite|embedded]
        [--spark ROUNDS [--spark-tasks N]] [--keep DIR]

Not a benchmark of `tableflow apply` and not a code path of tableflow: it measures, part by
part, what a batch would cost if it were written the way plain append runs are now written
by their read tasks (ingest/sharing.py, pipeline/shared_tasks.py), i.e. with pyarrow and
pyiceberg in Python, instead of Spark's window + append + MERGE. docs/history/performance-issues-26-31.md
("Upsert tables that grow", session 6) holds the figures and what an implementation would
need.

For each size in `--rows`, in a scratch file:// warehouse (pyiceberg's SQLite catalog):
- builds the upsert table of `benchmarks/upsert.py`'s shape (its 10 columns plus the three
  position columns of every upsert table) with pyiceberg's writer, in data files of
  `--file-rows` rows, one commit (not through Kafka: `benchmarks/upsert.py` does that);
- then `--batches` batches of `--batch` changes (`upsert.batch_changes`: updates of existing
  keys, 10% of them on hot keys repeated in the batch, 10% tombstones), each with Kafka
  positions later than the table's rows, applied in these timed parts:
  1. `latest`: the batch reduced to each key's latest record by (timestamp, partition,
     offset) (ingest/upsert_order.py), with pyarrow;
  2. `scan`: per data file (the unit a Spark task would take): its key and position
     columns read, its existing position deletes applied, the batch's keys found
     (`is_in`), and the rows whose key's batch record is later than the row's position
     kept as positions to delete;
  3. `deletes table`: the keys the table does not hold compared with their latest
     remembered delete (the deletes table beside the upsert table);
  4. `write deletes`: one position delete file per data file that had matches
     (file_path, pos; field ids 2147483546/2147483545; file_path bounds, so readers
     index it by data file), Parquet by pyarrow (tableflow's
     `pipeline/upsert_rows.write_position_deletes`);
  5. `write rows`: the rows to insert (updates and new keys) as one data file, by the
     writer the read tasks use (pipeline/data_files.write_data_files);
  6. `remember`: the batch's deletes appended to the deletes table (pyiceberg append);
  7. `commit`: ONE snapshot (operation `overwrite`, as Iceberg's RowDelta) holding the data
     file, a DELETES manifest of the position delete files and the offsets in its
     summary, committed by a pyiceberg transaction with an assert on main.
- after the batches: the table read back by pyiceberg and by DuckDB's `iceberg_scan`
  (position deletes applied by each reader) and compared, every column of every row, with
  an independent model (the initial rows with each batch's last record per key applied in
  produce order, `upsert.final_rows`), after a replay of the last batch (same offsets,
  as a re-run after a crash before the publish) that must delete and insert nothing.

`--key-only`: a data file whose `_kafka_timestamp` upper bound is below the batch's
earliest timestamp has only its key column read. `--catalog embedded`: tableflow's REST
catalog served on loopback instead of SQLite (every commit through its HTTP API).
`--spark ROUNDS`: then Spark (Iceberg's Java reader) must read the same count and sum,
the next batch's scan runs as a Spark job (`--spark-tasks` tasks, default one per file)
ROUNDS times, and with the embedded catalog Spark compacts the table
(`rewrite_position_delete_files`, `rewrite_data_files`) and both readers are compared
with the model again.

Prints per batch the wall and CPU seconds of each part (CPU: this process, all threads;
the parts run serially in one process: `scan` is the sum over data files, which tasks
would run in parallel, and its largest file is printed beside it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from upsert import (  # benchmarks/ on sys.path
    Change,
    add_workload_arguments,
    batch_changes,
    final_rows,
    initial_rows,
)

from tableflow_core.engine.row_delta import RowDelta
from tableflow_core.ingest.upsert_order import (
    OFFSET_COLUMN,
    PARTITION_COLUMN,
    TIMESTAMP_COLUMN,
)
from tableflow_core.pipeline.data_files import file_io_properties, write_data_files
from tableflow_core.pipeline.upsert_rows import write_position_deletes

POSITIONS = (TIMESTAMP_COLUMN, PARTITION_COLUMN, OFFSET_COLUMN)
PARTITIONS = 4
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Parts:
    """Wall and CPU seconds of named parts of one batch."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - wall
        self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - cpu

    def line(self) -> str:
        parts = ", ".join(f"{k} {self.wall[k]:.2f}/{self.cpu[k]:.2f}" for k in self.wall)
        return (
            f"total {sum(self.wall.values()):.2f} s wall / {sum(self.cpu.values()):.2f} s CPU "
            f"({parts})"
        )


def with_positions(rows: pa.Table, offset_base: int) -> pa.Table:
    """`rows` with Kafka positions: partition id % 4, offsets in row order, timestamps
    one millisecond apart from START."""
    n = rows.num_rows
    ids = rows.column("id").to_numpy()
    micros = (
        int(START.timestamp()) * 1_000_000 + (offset_base + np.arange(n, dtype=np.int64)) * 1000
    )
    return (
        rows.append_column(TIMESTAMP_COLUMN, pa.array(micros, pa.timestamp("us", "UTC")))
        .append_column(PARTITION_COLUMN, pa.array((ids % PARTITIONS).astype(np.int32)))
        .append_column(OFFSET_COLUMN, pa.array(offset_base + np.arange(n, dtype=np.int64)))
    )


def batch_table(changes: list[Change], offset_base: int, schema: pa.Schema) -> pa.Table:
    """The batch as the read tasks' decode gives it: the table's columns, a tombstone
    flag and the record's position (not timed: it stands for Kafka read + decode)."""
    values = [v if v is not None else {"id": k} for k, v in changes]
    user = [f.name for f in schema if f.name not in POSITIONS]
    rows = pa.Table.from_pylist(values, schema=pa.schema([schema.field(n) for n in user]))
    rows = with_positions(rows, offset_base)
    return rows.append_column("__tombstone", pa.array([v is None for _, v in changes]))


def latest_per_key(batch: pa.Table) -> pa.Table:
    """Each key's latest record by (timestamp, partition, offset); no timestamp first."""
    order = pc.sort_indices(
        batch,
        sort_keys=[("id", "ascending"), *((c, "descending") for c in POSITIONS)],
    )  # nulls last (the default): a record without a timestamp is the earliest
    ordered = batch.take(order)
    ids = ordered.column("id").to_numpy()
    first = np.ones(len(ids), dtype=bool)
    first[1:] = ids[1:] != ids[:-1]
    return ordered.filter(pa.array(first))


def _position_arrays(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ts = pc.fill_null(table.column(TIMESTAMP_COLUMN).cast(pa.int64()), np.iinfo(np.int64).min)
    return (
        ts.to_numpy(),
        table.column(PARTITION_COLUMN).to_numpy(zero_copy_only=False),
        pc.fill_null(table.column(OFFSET_COLUMN), -1).to_numpy(),
    )


def later(new: pa.Table, old: pa.Table) -> np.ndarray:
    """new's position after old's, row by row (a NULL stored position is earliest)."""
    nt, np_, no = _position_arrays(new)
    ot, op, oo = _position_arrays(old)
    old_unknown = pc.is_null(old.column(OFFSET_COLUMN)).to_numpy(zero_copy_only=False)
    after = (nt > ot) | ((nt == ot) & ((np_ > op) | ((np_ == op) & (no > oo))))
    return old_unknown | after


def existing_deletes(io: Any, data_path: str, delete_paths: list[str]) -> np.ndarray:
    """Positions of data file `data_path` that earlier batches deleted."""
    positions = []
    for delete_path in delete_paths:
        with io.new_input(delete_path).open() as f:
            deletes = pq.read_table(f, columns=["file_path", "pos"])
        mine = deletes.filter(pc.equal(deletes.column("file_path"), data_path))
        positions.append(mine.column("pos").to_numpy())
    return np.concatenate(positions) if positions else np.empty(0, dtype=np.int64)


def older_than_batch(upper: bytes | None, latest: pa.Table) -> bool:
    """Whether every row of a data file whose `_kafka_timestamp` upper bound is `upper`
    comes before every record of the batch (then its position columns need not be read:
    every live row the batch's keys match is superseded). Not when the file has no bound
    or a batch record has no timestamp (the earliest of all)."""
    ts = latest.column(TIMESTAMP_COLUMN)
    if upper is None or ts.null_count or len(ts) == 0:
        return False
    return int.from_bytes(upper, "little", signed=True) < pc.min(ts.cast(pa.int64())).as_py()


def scan_file(
    io: Any, data_path: str, delete_paths: list[str], latest: pa.Table, key_only: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One data file (a Spark task's unit) and its position delete files: (positions to
    delete, batch rows whose key the file holds live, batch rows later than their stored
    row). `key_only`: the file is older than the batch (`older_than_batch`), only its key
    column is read."""
    with io.new_input(data_path).open() as f:
        stored = pq.read_table(f, columns=["id"] if key_only else ["id", *POSITIONS])
    hit = pc.is_in(stored.column("id"), value_set=latest.column("id")).to_numpy(
        zero_copy_only=False
    )
    rows = np.flatnonzero(hit)
    if delete_paths and len(rows):
        rows = rows[~np.isin(rows, existing_deletes(io, data_path, delete_paths))]
    matched = stored.take(pa.array(rows))
    batch_rows = pc.index_in(matched.column("id"), value_set=latest.column("id")).to_numpy()
    if key_only:
        return rows, batch_rows, batch_rows
    newer = later(latest.take(pa.array(batch_rows)), matched)
    return rows[newer], batch_rows, batch_rows[newer]


def commit_row_delta(
    table: Any, data_files: list[Any], delete_files: list[Any], props: dict[str, str]
) -> int:
    """One snapshot with the data files and the position delete files (Iceberg's RowDelta;
    the study's producer is now tableflow's, `engine/row_delta.RowDelta`)."""
    transaction = table.transaction()
    producer = RowDelta(transaction, table.io, delete_files, props, "main")
    for data_file in data_files:
        producer.append_data_file(data_file)
    producer.commit()
    transaction.commit_transaction()
    return int(producer.snapshot_id)


def build_table(catalog: Any, rows: int, file_rows: int) -> tuple[Any, pa.Table, float]:
    initial = with_positions(initial_rows(rows), 0)
    started = time.perf_counter()
    table = catalog.create_table("bench.events", initial.schema, properties={"format-version": "2"})
    metadata, props = table.metadata, file_io_properties(table.io.properties)
    files = [
        f
        for start in range(0, rows, file_rows)
        for f in write_data_files(metadata, props, initial.slice(start, file_rows))
    ]
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for f in files:
            append.append_data_file(f)
    return catalog.load_table("bench.events"), initial, time.perf_counter() - started


def apply_batch(
    catalog: Any,
    table: Any,
    batch: pa.Table,
    number: int,
    parts: Parts,
    key_only_files: bool = False,
) -> dict[str, Any]:
    io, location = table.io, table.metadata.location
    ts_field = table.schema().find_field(TIMESTAMP_COLUMN).field_id
    skipped_positions = 0
    with parts.part("latest"):
        latest = latest_per_key(batch)
    tombstone = latest.column("__tombstone").to_numpy(zero_copy_only=False)
    n = latest.num_rows
    held, newer = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    to_delete: dict[str, np.ndarray] = {}
    largest = 0.0
    with parts.part("plan files"):
        tasks = list(table.scan(selected_fields=("id", *POSITIONS)).plan_files())
    for task in tasks:
        started = time.perf_counter()
        with parts.part("scan"):
            deletes = [d.file_path for d in task.delete_files]
            key_only = key_only_files and older_than_batch(
                (task.file.upper_bounds or {}).get(ts_field), latest
            )
            skipped_positions += key_only
            positions, batch_rows, later_rows = scan_file(
                io, task.file.file_path, deletes, latest, key_only
            )
        largest = max(largest, time.perf_counter() - started)
        held[batch_rows] = True
        newer[later_rows] = True
        if len(positions):
            to_delete[task.file.file_path] = positions
    fresh = ~held
    with parts.part("deletes table"):
        deletes_id = ("bench", "events__tableflow_deletes")
        if catalog.table_exists(deletes_id) and fresh.any():
            remembered = catalog.load_table(deletes_id).scan().to_arrow()
            where = np.flatnonzero(fresh)
            fresh[where] = after_remembered(latest.take(pa.array(where)), remembered)
    insert = (newer | fresh) & ~tombstone
    with parts.part("write deletes"):
        delete_files = [
            write_position_deletes(io, location, p, pos) for p, pos in to_delete.items()
        ]
    with parts.part("write rows"):
        user = [c for c in table.schema().column_names]
        data_files = write_data_files(
            table.metadata,
            file_io_properties(io.properties),
            latest.filter(pa.array(insert)).select(user),
        )
    with parts.part("remember"):
        gone = latest.filter(pa.array(tombstone)).select(["id", *POSITIONS])
        if gone.num_rows:
            if not catalog.table_exists(deletes_id):
                catalog.create_table(deletes_id, gone.schema, properties={"format-version": "2"})
            catalog.load_table(deletes_id).append(gone)
    with parts.part("commit"):
        commit_row_delta(
            table, data_files, delete_files,
            {"tableflow.offsets": f"batch-{number}"},
        )  # fmt: skip
    return {
        "files scanned": len(tasks),
        "of them key only": skipped_positions,
        "largest file scan": largest,
        "rows deleted": sum(len(p) for p in to_delete.values()),
        "rows inserted": int(insert.sum()),
        "delete files": len(delete_files),
    }


def after_remembered(new_keys: pa.Table, remembered: pa.Table) -> np.ndarray:
    """Whether each of `new_keys`' records (keys the table does not hold) comes after its
    key's latest remembered delete, or is that very delete (a run that remembered it and
    did not publish), or its key has none."""
    mine = remembered.filter(pc.is_in(remembered.column("id"), value_set=new_keys.column("id")))
    keep = np.ones(new_keys.num_rows, dtype=bool)
    if mine.num_rows == 0:
        return keep
    last = latest_per_key(mine)
    at = pc.index_in(new_keys.column("id"), value_set=last.column("id"))
    known = np.flatnonzero(pc.is_valid(at).to_numpy(zero_copy_only=False))
    if len(known):
        new = new_keys.take(pa.array(known))
        old = last.take(at.take(pa.array(known)))
        a, b = _position_arrays(new), _position_arrays(old)
        same = (a[0] == b[0]) & (a[1] == b[1]) & (a[2] == b[2])
        keep[known] = later(new, old) | same
    return keep


def spark_part(
    table: Any,
    batch: pa.Table,
    want: pa.Table,
    rounds: int,
    tasks: int,
    key_only: bool,
    catalog: dict[str, str] | None,
) -> bool:
    """Spark (Iceberg's Java reader) reads the table the study wrote and must agree with
    the model; then the per-file scan of `batch` as a Spark job, one task per data file
    (or `tasks` tasks of several files; mapInArrow, as the read tasks run), `rounds` times
    in one application. With `catalog` (the embedded catalog's Spark properties): then
    Spark's compaction of the table (`rewrite_position_delete_files`, then
    `rewrite_data_files` with the deletes applied) through that catalog; True when it ran."""
    import os

    from pyspark.sql import functions as F
    from upsert import tree_cpu

    from tableflow_core.engine.spark_session import build_spark_session

    spark = build_spark_session("local[2]", app_name="row-delta-study")
    started = time.perf_counter()
    read = spark.read.format("iceberg").load(table.metadata_location)
    count, total = read.agg(F.count("*"), F.sum("amount")).first()
    want_total = pc.sum(want.column("amount")).as_py()
    if count != want.num_rows or abs(total - want_total) > 1e-6 * abs(want_total):
        raise SystemExit(f"Spark differs from the model: {count} rows, sum {total}")
    print(
        f"Spark reads it: {count:,} rows, sum of amounts equal "
        f"({time.perf_counter() - started:.2f} s, the application's first query)"
    )
    latest = latest_per_key(batch).select(["id", *POSITIONS])
    ts_field = table.schema().find_field(TIMESTAMP_COLUMN).field_id
    files = [
        (
            t.file.file_path,
            [d.file_path for d in t.delete_files],
            key_only and older_than_batch((t.file.upper_bounds or {}).get(ts_field), latest),
        )
        for t in table.scan().plan_files()
    ]
    shipped = spark.sparkContext.broadcast(latest)
    props = file_io_properties(table.io.properties)
    location = table.metadata.location

    def scan_task(batches: Any) -> Any:
        from pyiceberg.io import load_file_io

        io = load_file_io(props, location=location)
        for rows in batches:
            for path, deletes, only_keys in zip(
                rows.column(0).to_pylist(),
                rows.column(1).to_pylist(),
                rows.column(2).to_pylist(),
                strict=True,
            ):
                positions, held, newer = scan_file(io, path, deletes, shipped.value, only_keys)
                yield pa.RecordBatch.from_pydict(
                    {
                        "path": [path],
                        "positions": [positions.tobytes()],
                        "held": [held.tobytes()],
                        "newer": [newer.tobytes()],
                    }
                )

    slices = min(len(files), tasks) if tasks else len(files)
    frame = spark.sparkContext.parallelize(files, slices).toDF(
        "path string, deletes array<string>, key_only boolean"
    )
    schema = "path string, positions binary, held binary, newer binary"
    for number in range(1, rounds + 1):
        before, wall = tree_cpu(os.getpid()), time.perf_counter()
        answers = frame.mapInArrow(scan_task, schema).collect()
        wall = time.perf_counter() - wall
        after = tree_cpu(os.getpid())
        cpu = {k: after[k] - before[k] for k in ("driver", "jvm", "workers")}
        deleted = sum(len(a["positions"]) // 8 for a in answers)
        print(
            f"Spark scan job {number}: {len(files)} files ({sum(f[2] for f in files)} key only) "
            f"in {slices} tasks, {wall:.2f} s wall, CPU "
            + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
            + f" (total {sum(cpu.values()):.2f} s); {deleted:,} positions to delete"
        )
    if catalog is not None:
        from tableflow_core.engine.spark_session import register_catalog

        register_catalog(spark, "study", catalog)
        for call in (
            "rewrite_position_delete_files(table => 'bench.events', "
            "options => map('rewrite-all', 'true'))",
            "rewrite_data_files(table => 'bench.events', "
            "options => map('rewrite-all', 'true', 'remove-dangling-deletes', 'true'))",
        ):
            started = time.perf_counter()
            answer = spark.sql(f"CALL study.system.{call}").collect()
            print(f"Spark {call.split('(')[0]}: {time.perf_counter() - started:.2f} s, {answer}")
    spark.stop()
    return catalog is not None


def model(initial: pa.Table, batches: list[list[Change]], user: list[str]) -> pa.Table:
    """What the table must hold: the initial rows, each batch's last record per key
    (produce order = position order here) applied in turn; user columns, sorted by id."""
    rows = initial.select(user)
    for changes in batches:
        upserts, deletes = final_rows(changes)
        touched = pa.array([k for k, _ in changes], pa.int64())
        rows = rows.filter(pc.invert(pc.is_in(rows.column("id"), value_set=touched)))
        if upserts.num_rows:
            rows = pa.concat_tables([rows, upserts.select(user).cast(rows.schema)])
        del deletes  # keys of tombstones: dropped with `touched`, never re-added
    return rows.sort_by("id")


def read_back(table: Any, user: list[str]) -> tuple[pa.Table, pa.Table, float, float]:
    from tableflow_core.readers.duckdb_reader import duckdb_connection

    started = time.perf_counter()
    by_pyiceberg = table.scan(selected_fields=tuple(user)).to_arrow()
    pyiceberg_s = time.perf_counter() - started
    con = duckdb_connection()
    started = time.perf_counter()
    columns = ", ".join(f'"{c}"' for c in user)
    by_duckdb = con.execute(
        f"SELECT {columns} FROM iceberg_scan('{table.metadata_location}')"
    ).arrow()
    if not isinstance(by_duckdb, pa.Table):
        by_duckdb = by_duckdb.read_all()
    duckdb_s = time.perf_counter() - started
    return by_pyiceberg.sort_by("id"), by_duckdb.sort_by("id"), pyiceberg_s, duckdb_s


def same_rows(name: str, got: pa.Table, want: pa.Table) -> None:
    got = got.cast(want.schema)
    if got.num_rows != want.num_rows or not got.equals(want):
        diff = got.num_rows - want.num_rows
        raise SystemExit(
            f"{name} differs from the model: {got.num_rows} rows vs {want.num_rows} ({diff:+})"
        )


@contextmanager
def study_catalog(kind: str, work: Path) -> Iterator[tuple[Any, dict[str, str] | None]]:
    """(pyiceberg catalog, Spark catalog properties or None): pyiceberg's SQLite catalog,
    or tableflow's embedded REST catalog served on a loopback port for the duration
    (every commit, the RowDelta's included, goes through its HTTP API)."""
    if kind == "sqlite":
        from pyiceberg.catalog.sql import SqlCatalog

        yield (
            SqlCatalog("study", uri=f"sqlite:///{work}/catalog.db", warehouse=f"file://{work}/wh"),
            None,
        )
        return
    from pyiceberg.catalog import load_catalog

    from tableflow_core.catalog import CatalogServerSettings, serve_in_background
    from tableflow_core.catalog.clients import spark_catalog_properties

    settings = CatalogServerSettings(warehouse=work / "wh", auth="none", access_log=False)
    with serve_in_background(settings) as server:
        catalog = load_catalog("study", **server.pyiceberg_properties())
        yield catalog, spark_catalog_properties(server.uri, server.credential)


def measure(rows: int, args: argparse.Namespace, work: Path) -> None:
    with study_catalog(args.catalog, work) as (catalog, spark_catalog):
        _measure(rows, args, catalog, spark_catalog)


def _measure(
    rows: int, args: argparse.Namespace, catalog: Any, spark_catalog: dict[str, str] | None
) -> None:
    print(
        f"\n== rows {rows:,}, data files of {args.file_rows:,} rows, batch {args.batch:,}, "
        f"{args.catalog} catalog"
    )
    catalog.create_namespace("bench")
    table, initial, built = build_table(catalog, rows, args.file_rows)
    print(f"built in {built:.1f} s ({len(list(table.scan().plan_files()))} data files)")
    user = [f.name for f in initial.schema if f.name not in POSITIONS]
    applied: list[list[Change]] = []
    offset = rows
    for number in range(1, args.batches + 1):
        changes = batch_changes(rows, args.batch, seed=number)
        batch = batch_table(changes, offset, initial.schema)
        offset += len(changes)
        parts = Parts()
        table = catalog.load_table("bench.events")
        facts = apply_batch(catalog, table, batch, number, parts, args.key_only)
        applied.append(changes)
        print(f"batch {number}: {parts.line()}")
        print(
            "  "
            + ", ".join(
                f"{k} {v:,.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in facts.items()
            )
        )
    # A re-run of the last batch (same offsets, as after a crash before the publish) must
    # change nothing: every record is at the position of the row or delete it left.
    parts = Parts()
    replay = apply_batch(
        catalog, catalog.load_table("bench.events"), batch, 0, parts, args.key_only
    )
    print(f"replay of batch {args.batches}: {parts.line()}")
    if replay["rows deleted"] or replay["rows inserted"]:
        raise SystemExit(f"the replay changed the table: {replay}")
    table = catalog.load_table("bench.events")
    want = model(initial, applied, user)
    by_pyiceberg, by_duckdb, pyiceberg_s, duckdb_s = read_back(table, user)
    same_rows("pyiceberg", by_pyiceberg, want)
    same_rows("DuckDB", by_duckdb, want)
    if args.spark:
        next_batch = batch_table(batch_changes(rows, args.batch, seed=99), offset, initial.schema)
        compacted = spark_part(
            table, next_batch, want, args.spark, args.spark_tasks, args.key_only, spark_catalog
        )
        if compacted:
            table = catalog.load_table("bench.events")
            again_pyiceberg, again_duckdb, py_s, duck_s = read_back(table, user)
            same_rows("pyiceberg after compaction", again_pyiceberg, want)
            same_rows("DuckDB after compaction", again_duckdb, want)
            left = sum(len(t.delete_files) for t in table.scan().plan_files())
            print(
                f"after Spark's compaction: pyiceberg {py_s:.2f} s, DuckDB {duck_s:.2f} s, both "
                f"equal the model; {left} delete files left"
            )
    print(
        f"read back: pyiceberg {pyiceberg_s:.2f} s, DuckDB {duckdb_s:.2f} s; both equal the model "
        f"({want.num_rows:,} rows, every column)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(parser, batches=3)
    parser.add_argument("--file-rows", type=int, default=1_250_000)
    parser.add_argument(
        "--spark",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="also: Spark reads the table back, and the next batch's scan runs as a Spark job "
        "(one task per data file) ROUNDS times",
    )
    parser.add_argument(
        "--spark-tasks", type=int, default=0, help="tasks of the Spark scan (0: one per file)"
    )
    parser.add_argument(
        "--key-only",
        action="store_true",
        help="read only the key column of a data file whose _kafka_timestamp upper bound is "
        "below the batch's earliest timestamp (`older_than_batch`)",
    )
    parser.add_argument(
        "--catalog",
        choices=("sqlite", "embedded"),
        default="sqlite",
        help="pyiceberg's SQLite catalog, or tableflow's embedded REST catalog (then --spark "
        "also compacts the table with Spark through it)",
    )
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temp dir)")
    args = parser.parse_args()
    for rows in (int(r) for r in args.rows.split(",")):
        work = (args.keep / str(rows)) if args.keep else Path(tempfile.mkdtemp(prefix="row-delta-"))
        work.mkdir(parents=True, exist_ok=True)
        try:
            measure(rows, args, work)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
