"""An append table's dedup against the table: the key set (pipeline/dedup_index.py) vs the
anti-join with the table's key column, as the table grows, in the same run.

    .venv/bin/python benchmarks/dedup_index.py [--rows 1000000,10000000] [--batch 100000]
        [--batches 4] [--file-rows 2000000] [--cores 2] [--anti-join-max ROWS]

For each size in `--rows`, a table of that many rows (`id` 0..rows-1, `name`, `amount`;
data files of `--file-rows` rows) is written by Spark itself into an Iceberg Hadoop
catalog in a temporary directory (not through Kafka: the dedup reads only the table; a
batch's Kafka read and decode are the same work at any table size, and no offsets are
involved here). Then `--batches` batches of `--batch` rows (90% new ids, 10% ids the
table holds, in random order; with the hidden source columns `__tf_partition` and
`__tf_offset` a decoded batch carries), each read by Spark from a Parquet file as the
decode stage would hand it over, go through both designs, each followed by a `noop`
write of its output (the whole batch computed, as the table's write would). A `--warmup` table goes through
the same first, unmeasured (the JVM's JIT):

- `anti-join`: `dedup_against_table` (the design before: every row's key read, joined;
  only on tables up to `--anti-join-max` rows);
- `key set`: the table's key set at the batch's snapshot (`key_set_at`: built at batch 1,
  as `tableflow apply`, a new process, does each batch: printed as `cold`; advanced by
  the appended file at batches 2.., as the batches of `tableflow run` do: `warm`), then
  `drop_rows_held` (the batch cached, its keys and source positions collected and looked
  up, the held rows anti-joined away by position).

Between batches the batch's new rows are appended to the table (not measured). Each
design's output is checked against a numpy model (its row count and sum of ids).
CPU seconds: `driver` is this Python process (pyarrow, numpy, the set), `batch` is the
whole process tree (the driver, Spark's JVM and its Python workers): the machine is
shared, so the ratios are the figures. Last line: `dedup 10M/1M batch cost: X.XXx` (the
key set's mean warm batch, whole tree, at the largest size over the smallest; the label
says the sizes).
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
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from upsert import tree_cpu  # benchmarks/ is on sys.path when a script runs

from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.pipeline.dedup_index import key_set_at
from tableflow_core.pipeline.key_index import IndexCache
from tableflow_core.pipeline.transforms.spark import dedup_against_table, drop_rows_held

CATALOG = "bench"
PARTITIONS = 4


def short(rows: int) -> str:
    return f"{rows // 1_000_000}M" if rows >= 1_000_000 else f"{rows // 1000}k"


def build_table(spark: Any, name: str, rows: int, file_rows: int) -> None:
    files = max(1, rows // file_rows)
    spark.range(0, rows, 1, files).selectExpr(
        "id", "concat('n', cast(id AS string)) AS name", "id * 0.5 AS amount"
    ).writeTo(name).using("iceberg").tableProperty("format-version", "2").create()


def pyiceberg_table(warehouse: Path, table: str) -> Any:
    """The table's current metadata, read by pyiceberg (a Hadoop catalog's version hint)."""
    from pyiceberg.table import StaticTable

    metadata = warehouse / "db" / table / "metadata"
    version = (metadata / "version-hint.text").read_text().strip()
    return StaticTable.from_metadata(f"file://{metadata}/v{version}.metadata.json")


def batch_file(work: Path, rows: int, size: int, number: int, seed: int) -> tuple[Path, np.ndarray]:
    """A batch of `size` rows: 90% new ids (after every id so far), 10% ids the table
    holds; the new ids (the model of what must land)."""
    rng = np.random.default_rng(seed)
    held = rng.choice(rows, size // 10, replace=False).astype(np.int64)
    start = rows + number * size
    new = np.arange(start, start + size - len(held), dtype=np.int64)
    ids = np.concatenate([new, held])
    rng.shuffle(ids)
    positions = np.arange(size, dtype=np.int64)
    table = pa.table(
        {
            "id": ids,
            "name": pa.array([f"b{number}-{i}" for i in ids]),
            "amount": ids * 0.25,
            SOURCE_PARTITION_COLUMN: (positions % PARTITIONS).astype(np.int32),
            SOURCE_OFFSET_COLUMN: rows + number * size + positions // PARTITIONS,
        }
    )
    path = work / f"batch_{rows}_{number}.parquet"
    pq.write_table(table, path)
    return path, new


def measured(run: Any) -> tuple[float, float, float, Any]:
    """(driver CPU s, whole-tree CPU s, wall s, result) of `run()`."""
    tree_before = sum(tree_cpu(os.getpid()).values())
    driver_before = time.process_time()
    wall_before = time.perf_counter()
    result = run()
    wall = time.perf_counter() - wall_before
    driver = time.process_time() - driver_before
    tree = sum(tree_cpu(os.getpid()).values()) - tree_before
    return driver, tree, wall, result


def check(df: Any, new: np.ndarray, design: str) -> None:
    from pyspark.sql import functions as F

    row = df.agg(F.count("*").alias("n"), F.sum("id").alias("s")).collect()[0]
    assert (row["n"], row["s"]) == (len(new), int(new.sum())), (design, row, len(new))


def measure(spark: Any, rows: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    warehouse = work / "warehouse"
    name = f"t_{rows}"
    identifier = f"{CATALOG}.db.{name}"
    started = time.perf_counter()
    build_table(spark, identifier, rows, args.file_rows)
    print(f"\n== {rows:,} rows ({max(1, rows // args.file_rows)} data files) written by Spark "
          f"in {time.perf_counter() - started:.1f} s; load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    cache = IndexCache()
    keys = ("id",)
    figures: dict[str, list[tuple[float, float, float]]] = {"anti": [], "cold": [], "warm": []}
    for number in range(args.batches):
        path, new = batch_file(work, rows, args.batch, number, seed=number + 1)
        table = pyiceberg_table(warehouse, name)
        snapshot = table.current_snapshot().snapshot_id
        batch = spark.read.parquet(str(path))

        def anti_join(batch: Any = batch, snapshot: int = snapshot) -> Any:
            out = dedup_against_table(batch, spark, identifier, keys, snapshot_id=snapshot)
            out.write.format("noop").mode("overwrite").save()
            return out

        cleanups: list[Any] = []

        def by_key_set(
            batch: Any = batch,
            table: Any = table,
            snapshot: int = snapshot,
            cleanups: Any = cleanups,
        ) -> Any:
            key_set = key_set_at(table, snapshot, keys, indexes=cache)
            assert key_set is not None, "no key set"
            out = drop_rows_held(
                batch, spark, keys, lambda r: key_set.contains([r.column("id")]), cleanups
            )
            out.write.format("noop").mode("overwrite").save()
            cache.keep((f"{table.metadata.table_uuid}/dedup", keys), key_set)
            return out

        # alternate which design goes first (the JVM's JIT, the page cache)
        order = [("anti", anti_join), ("set", by_key_set)]
        if number % 2:
            order.reverse()
        if rows > args.anti_join_max:
            order = [("set", by_key_set)]
        for design, run in order:
            driver, tree, wall, out = measured(run)
            check(out, new, design)
            kind = design if design == "anti" else ("cold" if number == 0 else "warm")
            figures[kind].append((driver, tree, wall))
            print(f"batch {number + 1} {kind:>4}: driver {driver:6.2f} CPU s, batch "
                  f"{tree:6.2f} CPU s, wall {wall:6.2f} s", flush=True)  # fmt: skip
        for cleanup in cleanups:
            cleanup()
        spark.read.parquet(str(path)).where(f"id >= {rows}").select("id", "name", "amount") \
            .writeTo(identifier).append()  # fmt: skip
    summary: dict[str, Any] = {"rows": rows}
    for kind, values in figures.items():
        if values:
            summary[kind] = tuple(sum(v[i] for v in values) / len(values) for i in range(3))
    anti, cold, warm = summary.get("anti"), summary["cold"], summary.get("warm")
    print(f"mean per batch at {short(rows)} (driver / batch CPU s, wall s): anti-join "
          + (f"{anti[0]:.2f} / {anti[1]:.2f}, {anti[2]:.2f}" if anti else "not run")
          + f"; key set cold {cold[0]:.2f} / "
          f"{cold[1]:.2f}, {cold[2]:.2f}" + (f"; warm {warm[0]:.2f} / {warm[1]:.2f}, "
          f"{warm[2]:.2f}" if warm else "") + f"; load average {os.getloadavg()[0]:.2f}",
          flush=True)  # fmt: skip
    spark.sql(f"DROP TABLE {identifier}")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000")
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--file-rows", type=int, default=2_000_000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--anti-join-max", type=int, default=10**12,
                        help="sizes up to which the anti-join runs too")  # fmt: skip
    parser.add_argument("--warmup", type=int, default=200_000, help="rows of a warm-up table")
    args = parser.parse_args()
    from tableflow_core.engine.spark_session import build_spark_session

    sizes = [int(s) for s in args.rows.split(",")]
    print(f"load average at start: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tf-dedup-bench-") as tmp:
        work = Path(tmp)
        catalog = {"type": "hadoop", "warehouse": f"file://{work / 'warehouse'}"}
        spark = build_spark_session(f"local[{args.cores}]", "tableflow-dedup-bench",
                                    catalogs={CATALOG: catalog})  # fmt: skip
        try:
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
            if args.warmup:  # the JVM's JIT and the first jobs, not measured
                print("warm-up (not a figure):", flush=True)
                warmup = argparse.Namespace(**{**vars(args), "batches": 2})
                measure(spark, args.warmup, warmup, work)
            summaries = [measure(spark, rows, args, work) for rows in sizes]
        finally:
            spark.stop()
    print(f"\nload average at end: {os.getloadavg()}")
    small, large = summaries[0], summaries[-1]
    label = f"{short(large['rows'])}/{short(small['rows'])}"
    for kind, what in (("anti", "anti-join"), ("cold", "key set cold")):
        if kind not in large:
            continue
        print(f"{what} {label} batch cost: {large[kind][1] / small[kind][1]:.2f}x (batch CPU), "
              f"driver {large[kind][0] / small[kind][0]:.2f}x")  # fmt: skip
    for summary in summaries:
        if "warm" in summary and "anti" in summary:
            print(f"at {short(summary['rows'])}: anti-join / warm key set batch CPU "
                  f"{summary['anti'][1] / summary['warm'][1]:.2f}x")  # fmt: skip
    warm_small, warm_large = small.get("warm"), large.get("warm")
    if warm_small and warm_large:
        print(f"key set warm {label} driver cost: {warm_large[0] / warm_small[0]:.2f}x")
        print(f"dedup {label} batch cost: {warm_large[1] / warm_small[1]:.2f}x")
    else:
        print(f"dedup {label} batch cost: n/a (--batches 1: no warm batch)")


if __name__ == "__main__":
    main()
