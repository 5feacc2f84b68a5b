"""The driver's upsert merge with the key index (pipeline/key_index.py) as the table grows.

    .venv/bin/python benchmarks/upsert_index.py [--rows 1000000,10000000] [--batch 100000]
        [--batches 5] [--file-rows 2000000] [--full-scan-max 20000000]

For each size in `--rows`, a table of that many keys is built directly with pyarrow and
pyiceberg (not through Kafka: ids 0..rows-1, each row's `_kafka_partition` id % 4,
`_kafka_offset` id // 4 and `_kafka_timestamp` 1 ms apart per offset, as a keyed
producer's first load would leave them; data files of `--file-rows` rows; a pyiceberg
SQLite catalog in a temporary directory). Then `--batches` batches of `--batch` records
(updates of random existing ids, some ids several times, 10% tombstones; later
timestamps than the table's) go through exactly what the shared job's driver does with a
batch the read tasks decoded: `merge_batch` (the deletes table's append inside it),
`publish_run` (one snapshot) and the index's `advance` (made by the next batch), in this
process, which keeps the index warm as
`tableflow run` does. Batch 1 builds the index (what `tableflow apply`, a new process,
pays on every batch: printed as `cold`); batches 2.. are warm. With sizes up to
`--full-scan-max` rows, one more batch runs without the index (every data file's keys and
every delete file read: the design before issue 45) for comparison.

Not measured here: the Kafka read and decode of the batch (the same work at any table
size, benchmarks/upsert.py measures it), Spark. CPU seconds are this process's
(time.process_time: every thread); the machine is shared, so the ratios are the figures.

After the batches every row is checked against an independent model (numpy: the initial
value of each id, then each batch's last record per id in produce order), read back by
pyiceberg (`to_arrow` of id, amount) and DuckDB (`iceberg_scan`, position deletes applied):
count, sum of amounts and, for the ids the batches touched, each row.

Last lines: `100M/1M batch cost: X.XXx` (the largest size's mean warm batch CPU over the
smallest's; the label says the sizes), `dedup 100M/1M batch cost: n/a` (measured by
benchmarks/dedup_index.py, not here) and the hook `first load vs append: X.XXx` (measured
by benchmarks/upsert.py's first-load part, not here: printed as n/a).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from upsert import add_workload_arguments  # benchmarks/ is on sys.path when a script runs

from tableflow_core.engine.run_branch import publish_run
from tableflow_core.ingest.bad_records import (
    SOURCE_OFFSET_COLUMN,
    SOURCE_PARTITION_COLUMN,
)
from tableflow_core.ingest.columns import SOURCE_TIMESTAMP_COLUMN, TOMBSTONE_COLUMN
from tableflow_core.ingest.upsert_order import (
    OFFSET_COLUMN,
    PARTITION_COLUMN,
    TIMESTAMP_COLUMN,
)
from tableflow_core.pipeline.data_files import write_data_files
from tableflow_core.pipeline.key_index import INDEXES
from tableflow_core.pipeline.upsert_rows import DeletesTable, merge_batch

PARTITIONS = 4
T0_MS = 1_700_000_000_000
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field(TIMESTAMP_COLUMN, pa.timestamp("us", tz="UTC")),
        pa.field(PARTITION_COLUMN, pa.int32()),
        pa.field(OFFSET_COLUMN, pa.int64()),
    ]
)


def short(rows: int) -> str:
    return f"{rows // 1_000_000}M" if rows >= 1_000_000 else f"{rows // 1000}k"


def initial_chunk(start: int, stop: int) -> pa.Table:
    ids = np.arange(start, stop, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "name": pc.binary_join_element_wise("n", pc.cast(pa.array(ids), pa.string()), ""),
            "amount": ids * 0.5,
            TIMESTAMP_COLUMN: pa.array((T0_MS + ids // PARTITIONS) * 1000, pa.int64()).cast(
                SCHEMA.field(TIMESTAMP_COLUMN).type
            ),
            PARTITION_COLUMN: (ids % PARTITIONS).astype(np.int32),
            OFFSET_COLUMN: ids // PARTITIONS,
        },
        schema=SCHEMA,
    )


def build_table(work: Path, rows: int, file_rows: int) -> tuple[Any, float]:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "bench", uri=f"sqlite:///{work}/catalog.db", warehouse=f"file://{work}/warehouse"
    )
    catalog.create_namespace("ns")
    properties = {"format-version": "2", "write.target-file-size-bytes": str(1 << 30)}
    table = catalog.create_table("ns.t", SCHEMA, properties=properties)
    started = time.perf_counter()
    files = []
    for start in range(0, rows, file_rows):
        chunk = initial_chunk(start, min(rows, start + file_rows))
        files += write_data_files(table.metadata, {}, chunk)
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for data_file in files:
            append.append_data_file(data_file)
    return catalog, time.perf_counter() - started


class Model:
    """What every reader must see: per id, its amount (NaN: no row)."""

    def __init__(self, rows: int) -> None:
        self.amount = np.arange(rows, dtype=np.float64) * 0.5
        self.touched: set[int] = set()

    def apply(self, ids: np.ndarray, amounts: np.ndarray, tombstone: np.ndarray) -> None:
        self.amount[ids] = np.where(tombstone, np.nan, amounts)  # later records last: wins
        self.touched.update(ids.tolist())


class Batches:
    def __init__(self, rows: int, size: int) -> None:
        self.rows, self.size = rows, size
        self.offsets = [rows // PARTITIONS + 1] * PARTITIONS
        self.clock = T0_MS + rows // PARTITIONS + 1000

    def next(self, seed: int) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        ids = rng.integers(0, self.rows, self.size)
        hot = rng.integers(0, self.rows, max(1, self.size // 50))
        repeat = rng.random(self.size) < 0.1
        ids[repeat] = rng.choice(hot, int(repeat.sum()))
        tombstone = rng.random(self.size) < 0.1
        amounts = ids * 0.25 + seed
        partitions = (ids % PARTITIONS).astype(np.int32)
        offsets = np.empty(self.size, dtype=np.int64)
        for p in range(PARTITIONS):
            where = np.flatnonzero(partitions == p)
            offsets[where] = self.offsets[p] + np.arange(len(where))
            self.offsets[p] += len(where)
        timestamps = self.clock + np.arange(self.size) // 100
        self.clock = int(timestamps[-1]) + 1
        decoded = pa.table(
            {
                "id": ids,
                "name": pc.binary_join_element_wise("b", pc.cast(pa.array(ids), pa.string()), ""),
                "amount": pa.array(np.where(tombstone, np.nan, amounts)),
                SOURCE_PARTITION_COLUMN: partitions,
                SOURCE_OFFSET_COLUMN: offsets,
                SOURCE_TIMESTAMP_COLUMN: timestamps,
                TOMBSTONE_COLUMN: tombstone,
            }
        )
        return decoded, ids, amounts, tombstone


def run_batch(catalog: Any, decoded: pa.Table, use_index: bool) -> dict[str, Any]:
    """One batch as the shared job's driver merges and publishes it."""
    deletes = DeletesTable(catalog, ("ns", "t__tableflow_deletes"), ("id",))
    cpu, wall = time.process_time(), time.perf_counter()
    table = catalog.load_table("ns.t")
    base = table.metadata.current_snapshot_id
    delta = merge_batch(
        table, base, decoded, ("id",), deletes.read, {},
        indexes=INDEXES if use_index else None, remember=deletes.remember,
    )  # fmt: skip
    merged = time.perf_counter()
    snapshot = publish_run(
        table, base, f"tableflow_run_bench{time.time_ns()}", {"tableflow.bench": "1"},
        data_files=delta.data_files, delete_files=delta.delete_files, new_branch=True,
    )  # fmt: skip
    if delta.advance_index is not None:
        delta.advance_index(snapshot)
    return {
        "cpu": time.process_time() - cpu,
        "wall": time.perf_counter() - wall,
        "merge": merged - wall,
        "inserted": delta.rows_inserted,
        "deleted": delta.rows_deleted,
        "delete_files": len(delta.delete_files),
        **{k: round(v, 3) for k, v in delta.timings.items()},
    }


def check_readers(catalog: Any, work: Path, model: Model) -> str:
    """pyiceberg and DuckDB against the model: count, sum, the touched ids' rows."""
    from tableflow_core.readers.duckdb_reader import duckdb_connection

    live = ~np.isnan(model.amount)
    count, total = int(live.sum()), float(np.nansum(model.amount))
    touched = np.array(sorted(model.touched), dtype=np.int64)
    table = catalog.load_table("ns.t")
    read = table.scan(selected_fields=("id", "amount")).to_arrow()
    ids = read.column("id").to_numpy()
    amounts = read.column("amount").to_numpy()
    assert read.num_rows == count, ("pyiceberg rows", read.num_rows, count)
    assert len(np.unique(ids)) == count, "pyiceberg: one row per key"
    assert np.isclose(amounts.sum(), total), ("pyiceberg sum", amounts.sum(), total)
    got = np.full(len(model.amount), np.nan)
    got[ids] = amounts
    assert np.allclose(got[touched], model.amount[touched], equal_nan=True), "pyiceberg rows"
    del read, ids, amounts, got
    connection = duckdb_connection()
    metadata = table.metadata_location
    n, s, distinct = connection.execute(
        f"SELECT count(*), sum(amount), count(DISTINCT id) FROM iceberg_scan('{metadata}')"
    ).fetchone()
    assert n == count and distinct == count, ("duckdb rows", n, count)
    assert np.isclose(s, total), ("duckdb sum", s, total)
    sample = touched[:: max(1, len(touched) // 2000)]
    rows = connection.execute(
        f"SELECT id, amount FROM iceberg_scan('{metadata}') WHERE id IN "
        f"({','.join(str(i) for i in sample)})"
    ).fetchall()
    duck = dict(rows)
    for i in sample.tolist():
        expected = model.amount[i]
        assert (i not in duck) if np.isnan(expected) else np.isclose(duck[i], expected), i
    return f"readers agree with the model: {count:,} rows (pyiceberg, DuckDB)"


def _pyiceberg_child(work: str, decoded: pa.Table, answer: Any) -> None:
    """pyiceberg's own `upsert` of the batch's latest record per id and `delete` of its
    tombstones' ids, on the benchmark's table (a child process: CPU seconds)."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import In

    catalog = SqlCatalog(
        "bench", uri=f"sqlite:///{work}/catalog.db", warehouse=f"file://{work}/warehouse"
    )
    table = catalog.load_table("ns.t")
    batch_ids = decoded.column("id").to_numpy()
    last = len(batch_ids) - 1 - np.unique(batch_ids[::-1], return_index=True)[1]
    latest = decoded.take(pa.array(last))  # each id's last record (produce order)
    started = time.process_time()
    ids = latest.column("id").to_numpy()
    tombstone = latest.column(TOMBSTONE_COLUMN).to_numpy(zero_copy_only=False)
    rows = pa.table(
        {
            "id": ids[~tombstone],
            "name": latest.column("name").filter(pa.array(~tombstone)),
            "amount": latest.column("amount").filter(pa.array(~tombstone)),
            TIMESTAMP_COLUMN: pa.array(
                latest.column(SOURCE_TIMESTAMP_COLUMN).to_numpy()[~tombstone] * 1000
            ).cast(SCHEMA.field(TIMESTAMP_COLUMN).type),
            PARTITION_COLUMN: latest.column(SOURCE_PARTITION_COLUMN).filter(pa.array(~tombstone)),
            OFFSET_COLUMN: latest.column(SOURCE_OFFSET_COLUMN).filter(pa.array(~tombstone)),
        },
        schema=SCHEMA,
    )
    table.upsert(rows, join_cols=["id"])
    table.delete(In("id", ids[tombstone].tolist()))
    answer.put(time.process_time() - started)


def pyiceberg_upsert(work: Path, decoded: pa.Table, timeout: float) -> float | None:
    """CPU seconds of pyiceberg's upsert + delete of the batch, None when it did not
    finish within `timeout` seconds."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    answer = context.Queue()
    child = context.Process(target=_pyiceberg_child, args=(str(work), decoded, answer))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        child.join()
        return None
    if child.exitcode != 0:
        raise RuntimeError(f"pyiceberg's upsert failed (exit code {child.exitcode})")
    return float(answer.get())


def measure(rows: int, args: argparse.Namespace) -> dict[str, Any]:
    INDEXES.clear()
    gc.collect()
    with tempfile.TemporaryDirectory(prefix="tableflow-upsert-index-") as tmp:
        work = Path(tmp)
        catalog, built_s = build_table(work, rows, args.file_rows)
        print(f"{short(rows)}: table built in {built_s:.1f} s ({args.file_rows:,} rows a file)")
        model = Model(rows)
        batches = Batches(rows, args.batch)
        results = []
        for i in range(1, args.batches + 1):
            decoded, ids, amounts, tombstone = batches.next(seed=i)
            result = run_batch(catalog, decoded, use_index=True)
            model.apply(ids, amounts, tombstone)
            label = "cold" if i == 1 else "warm"
            print(f"  batch {i} ({label}): {result}")
            results.append(result)
        if rows <= args.full_scan_max:
            decoded, ids, amounts, tombstone = batches.next(seed=args.batches + 1)
            scan = run_batch(catalog, decoded, use_index=False)
            model.apply(ids, amounts, tombstone)
            print(f"  batch without the index (every file's keys and delete files): {scan}")
        else:
            scan = None
        print("  " + check_readers(catalog, work, model))
        index_bytes = 0
        pyiceberg: float | None = None
        if rows <= args.pyiceberg_max:
            decoded, *_ = batches.next(seed=args.batches + 2)
            pyiceberg = pyiceberg_upsert(work, decoded, args.pyiceberg_timeout)
            said = "did not finish" if pyiceberg is None else f"{pyiceberg:.2f} CPU s"
            print(f"  pyiceberg upsert + delete of a batch: {said}")
    warm = results[1:]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    summary = {
        "rows": rows,
        "cold_cpu": results[0]["cpu"],
        "cold_build": results[0].get("index_build", 0.0),
        "warm_cpu": float(np.mean([r["cpu"] for r in warm])),
        "warm_wall": float(np.mean([r["wall"] for r in warm])),
        "scan_cpu": scan["cpu"] if scan else None,
        "pyiceberg_cpu": pyiceberg,
        "max_rss_mb": rss,
        "index_bytes": index_bytes,
    }
    print(
        f"  {short(rows)}: warm batch {summary['warm_cpu']:.2f} CPU s "
        f"({summary['warm_wall']:.2f} wall), cold batch {summary['cold_cpu']:.2f} CPU s "
        f"(index build {summary['cold_build']:.2f} s), without the index "
        f"{'-' if scan is None else format(scan['cpu'], '.2f')} CPU s; "
        f"max RSS so far {rss:.0f} MB; load {os.getloadavg()}"
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(parser, batches=5)
    parser.add_argument("--file-rows", type=int, default=2_000_000)
    parser.add_argument("--full-scan-max", type=int, default=20_000_000)
    parser.add_argument("--pyiceberg-max", type=int, default=0, help="sizes to run pyiceberg on")
    parser.add_argument("--pyiceberg-timeout", type=float, default=600.0)
    args = parser.parse_args()
    sizes = [int(s) for s in args.rows.split(",")]
    print(f"load average at start: {os.getloadavg()}")
    summaries = [measure(rows, args) for rows in sizes]
    small, large = summaries[0], summaries[-1]
    print(f"load average at end: {os.getloadavg()}")
    ratio = large["warm_cpu"] / small["warm_cpu"]
    print(f"cold {short(large['rows'])}/{short(small['rows'])} batch cost: "
          f"{large['cold_cpu'] / small['cold_cpu']:.2f}x")  # fmt: skip
    print(f"{short(large['rows'])}/{short(small['rows'])} batch cost: {ratio:.2f}x")
    for summary in summaries:
        if summary["pyiceberg_cpu"] is not None:
            print(f"vs pyiceberg at {short(summary['rows'])}: "
                  f"{summary['pyiceberg_cpu'] / summary['warm_cpu']:.1f}x (CPU)")  # fmt: skip
    print(f"dedup {short(large['rows'])}/{short(small['rows'])} batch cost: n/a "
          "(benchmarks/dedup_index.py)")  # fmt: skip
    print("first load vs append: n/a")


if __name__ == "__main__":
    main()
