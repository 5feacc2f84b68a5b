"""What readers of an upsert table pay for its delete files, with and without the
compaction they trigger (maintenance/delete_load.py), against the compacted table.

    .venv/bin/python benchmarks/upsert_deletes_scan.py [--rows 1000000] [--batch 100000] [--batches 8]

Starts its own Apache Kafka and dev registry; produces `--rows` Avro records keyed by an
Avro key {id} (benchmarks/upsert.py's topic), then two upsert tables read that topic,
each loaded by `tableflow apply`'s code (PlanTask + ApplyTask, one Spark application):
- `without`: batches applied, nothing else (delete files pile up until a maintenance);
- `with`: after each batch, the maintenance `tableflow run` runs after a refresh
  (MaintainTask on the table: no `maintenance:` block, so only what the delete files make
  due).
Each batch is `--batch` records (updates of existing keys, keys repeated, 10% tombstones;
benchmarks/upsert.py's `batch_changes`). After each batch, both tables are scanned in
full: pyiceberg (`scan().to_arrow()`) and DuckDB (`SELECT * FROM iceberg_scan(...)`,
fetched as Arrow), the best of `--repeats`; at the end `without` is compacted (deletes
applied) and scanned the same way: the reference. Per batch: each table's seconds, its
delete files and its ratio to the compacted scan. The last lines give the worst ratio of
each table over the batches.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ingest import stack, write_project
from upsert import PARTITIONS, Topic, batch_changes, compact, measured_apply

from tableflow_core.dev import broker


def best_scans(root: Path, repeats: int) -> tuple[float, float, int, int]:
    """(pyiceberg s, DuckDB s, rows, delete files): a full scan of every column, the
    best of `repeats`."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.readers.duckdb_reader import duckdb_connection
    from tableflow_core.targets.catalog import open_catalog

    with open_catalog(load_project(root)) as handle:
        table = handle.catalog.load_table("bench.events")
        con = duckdb_connection()
        py_s, duck_s, rows = float("inf"), float("inf"), 0
        for _ in range(repeats):
            started = time.perf_counter()
            rows = table.scan().to_arrow().num_rows
            py_s = min(py_s, time.perf_counter() - started)
            started = time.perf_counter()
            duck_rows = (
                con.execute(f"SELECT * FROM iceberg_scan('{table.metadata_location}')")
                .to_arrow_table()
                .num_rows
            )
            duck_s = min(duck_s, time.perf_counter() - started)
            assert duck_rows == rows, (duck_rows, rows)
        delete_files = sum(len(task.delete_files) for task in table.scan().plan_files())
    return py_s, duck_s, rows, delete_files


def maintain(root: Path, spark: Any) -> str:
    """What `tableflow run` does after a refresh: the maintenance due on the table."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.tasks.maintain import MaintainTask

    project = load_project(root)
    (done,) = MaintainTask(project, project.tables, spark=spark).run()
    assert done.ok, done
    if done.report is None:
        return "nothing due"
    return "; ".join(d.describe() for d in done.due)


def main() -> None:
    from tableflow_core.engine.spark_session import build_spark_session

    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tf-deletes-scan-"))
    with stack(work) as (bootstrap, url):
        name = "bench_deletes_scan"
        broker.create_topics(bootstrap, {name: PARTITIONS})
        topic = Topic(bootstrap, url, name)
        topic.produce_initial(args.rows)
        keys = {"mode": "upsert", "key_columns": ["id"], "key": {"format": "avro"}}
        roots = {
            label: write_project(work / label, bootstrap, url, name, args.cores, **keys)
            for label in ("without", "with")
        }
        spark = build_spark_session(f"local[{args.cores}]", "tableflow-bench")
        try:
            print(f"{args.rows:,} rows, batches of {args.batch:,} records (10% tombstones); "
                  f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)", flush=True)  # fmt: skip
            for root in roots.values():
                measured_apply(root, spark)
            scans: dict[str, list[tuple[float, float, int, int]]] = {k: [] for k in roots}
            for seed in range(1, args.batches + 1):
                topic.produce(batch_changes(args.rows, args.batch, seed=seed))
                for label, root in roots.items():
                    measured_apply(root, spark)
                    did = maintain(root, spark) if label == "with" else ""
                    scans[label].append(best_scans(root, args.repeats))
                    py_s, duck_s, rows, deletes = scans[label][-1]
                    print(f"batch {seed} {label:<8} pyiceberg {py_s:5.2f} s, DuckDB {duck_s:5.2f} s, "
                          f"{rows:,} rows, {deletes} delete files {did}", flush=True)  # fmt: skip
            started = time.perf_counter()
            compact(roots["without"], spark)
            py_c, duck_c, rows, deletes = best_scans(roots["without"], args.repeats)
            print(f"compacted ({time.perf_counter() - started:.1f} s with its scans): pyiceberg "
                  f"{py_c:.2f} s, DuckDB {duck_c:.2f} s, {rows:,} rows, {deletes} delete files; "
                  f"load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
            print(f"{'batch':>5} " + "".join(f"{f'{k} py':>12}{f'{k} duck':>14}" for k in roots))
            for i in range(args.batches):
                print(f"{i + 1:>5} " + "".join(
                    f"{scans[k][i][0] / py_c:>11.2f}x{scans[k][i][1] / duck_c:>13.2f}x" for k in roots
                ))  # fmt: skip
            for label in roots:
                worst_py = max(s[0] for s in scans[label]) / py_c
                worst_duck = max(s[1] for s in scans[label]) / duck_c
                print(f"{label} the trigger: worst scan vs compacted: pyiceberg {worst_py:.2f}x, "
                      f"DuckDB {worst_duck:.2f}x")  # fmt: skip
        finally:
            spark.stop()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
