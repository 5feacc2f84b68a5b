"""Maintenance: scan time of a table after many small commits, before vs after compaction.

    .venv/bin/python benchmarks/maintenance.py [--commits 100] [--rows 5000] [--merges 10]

Spark local[2] with the Iceberg runtime (Hadoop catalog on a tmp dir). Measured in the
same run:
- append table: `--commits` small appends (each carrying its offsets in the snapshot
  summary, as ingest does), then `run_maintenance` with compact + rewrite_manifests;
- upsert-like table (format v2, merge-on-read): one load, then `--merges` MERGE INTO
  batches updating 5% of the keys each (position delete files), then rewrite_deletes
  (rewrite_position_delete_files) and then compact.
Each state is scanned fully by pyiceberg (`to_arrow`) and by DuckDB (`iceberg_scan`,
count + sum), best of 3; row counts, sums and committed offsets must be unchanged.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tableflow_core.config.models.maintenance import (
    CompactSettings,
    RewriteDeletesSettings,
    RewriteManifestsSettings,
)
from tableflow_core.engine.spark_session import build_spark_session
from tableflow_core.maintenance import DueOperation, run_maintenance
from tableflow_core.maintenance.run import current_metadata_location
from tableflow_core.maintenance.target import SparkTable
from tableflow_core.state.offsets import OFFSETS_KEY, encode_offsets


def duckdb_connection() -> Any:
    import importlib

    import duckdb

    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    for name in ("avro", "httpfs", "iceberg"):
        package = importlib.import_module(f"duckdb_extension_{name}")
        (path,) = Path(package.__file__).parent.glob(f"extensions/*/{name}.duckdb_extension")
        con.execute(f"LOAD '{path}'")
    return con


def best_of(runs: int, work: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        began = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - began)
    return min(times), result


def measure(spark: Any, table: SparkTable, label: str) -> dict[str, Any]:
    from pyiceberg.table import StaticTable

    location = current_metadata_location(spark, table)
    assert location is not None
    static = StaticTable.from_metadata(location)
    files = static.inspect.files()
    data_files = sum(1 for c in files["content"].to_pylist() if c == 0)
    delete_files = sum(1 for c in files["content"].to_pylist() if c != 0)

    def by_pyiceberg() -> tuple[int, float]:
        arrow = StaticTable.from_metadata(location).scan().to_arrow()
        return arrow.num_rows, round(sum(arrow["amount"].to_pylist()), 2)

    con = duckdb_connection()

    def by_duckdb() -> tuple[int, float]:
        rows, amount = con.execute(
            f"SELECT count(*), sum(amount) FROM iceberg_scan('{location}')"
        ).fetchone()
        return int(rows), round(float(amount), 2)

    py_s, py_result = best_of(3, by_pyiceberg)
    duck_s, duck_result = best_of(3, by_duckdb)
    assert py_result == duck_result, (py_result, duck_result)
    return {
        "label": label,
        "data_files": data_files,
        "delete_files": delete_files,
        "rows": py_result[0],
        "sum": py_result[1],
        "pyiceberg_s": py_s,
        "duckdb_s": duck_s,
    }


def show(rows: list[dict[str, Any]]) -> None:
    print(f"{'state':<34} {'data files':>10} {'delete files':>12} {'rows':>9} "
          f"{'pyiceberg s':>11} {'duckdb s':>9}")  # fmt: skip
    for r in rows:
        print(f"{r['label']:<34} {r['data_files']:>10} {r['delete_files']:>12} {r['rows']:>9} "
              f"{r['pyiceberg_s']:>11.3f} {r['duckdb_s']:>9.3f}")  # fmt: skip


def frame(spark: Any, start: int, count: int) -> Any:
    return spark.range(start, start + count, numPartitions=1).selectExpr(
        "id", "concat('user-', id % 5000) AS user", "id * 0.25 AS amount",
        "cast(id % 100 AS int) AS qty", "id % 2 = 0 AS active", "concat('city-', id % 300) AS city",
    )  # fmt: skip


def append_table(spark: Any, commits: int, rows: int) -> list[dict[str, Any]]:
    table = SparkTable("bench", ("bench",), "appends")
    spark.sql(
        f"CREATE TABLE {table.sql} (id BIGINT, user STRING, amount DOUBLE, qty INT, active BOOLEAN, "
        "city STRING) USING iceberg TBLPROPERTIES ('format-version' = '2')"
    )
    began = time.perf_counter()
    for commit in range(commits):
        offsets = {0: (commit + 1) * rows}
        (
            frame(spark, commit * rows, rows)
            .writeTo(table.sql)
            .option(f"snapshot-property.{OFFSETS_KEY}", encode_offsets("events", offsets))
            .append()
        )
    print(f"{commits} appends of {rows} rows: {time.perf_counter() - began:.1f}s")
    before = measure(spark, table, f"after {commits} small commits")
    ops = [
        DueOperation("appends", "compact", CompactSettings(min_input_files=2), 0, None),
        DueOperation("appends", "rewrite_manifests", RewriteManifestsSettings(), 0, None),
    ]
    began = time.perf_counter()
    report = run_maintenance(spark, str(table), ops)
    print(
        f"compact + rewrite_manifests: {time.perf_counter() - began:.1f}s ({report.summary_line()})"
    )
    assert report.ok and report.offsets_before == report.offsets_after == {0: commits * rows}
    after = measure(spark, table, "after compaction")
    assert (after["rows"], after["sum"]) == (before["rows"], before["sum"])
    return [before, after]


def upsert_table(spark: Any, merges: int, rows: int) -> list[dict[str, Any]]:
    table = SparkTable("bench", ("bench",), "upserts")
    spark.sql(
        f"CREATE TABLE {table.sql} (id BIGINT, user STRING, amount DOUBLE, qty INT, active BOOLEAN, "
        "city STRING) USING iceberg TBLPROPERTIES ('format-version' = '2', "
        "'write.merge.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read', "
        "'write.delete.mode' = 'merge-on-read')"
    )
    frame(spark, 0, rows).repartition(4).writeTo(table.sql).append()
    batch = rows // 20
    for merge in range(merges):
        updates = frame(spark, 0, rows).where(f"id % 20 = {merge % 20}").limit(batch)
        updates.selectExpr("id", "user", "amount + 1 AS amount", "qty", "active", "city") \
            .createOrReplaceTempView("updates")  # fmt: skip
        spark.sql(
            f"MERGE INTO {table.sql} t USING updates u ON t.id = u.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
    states = [measure(spark, table, f"after {merges} MERGE batches")]
    rewrite = [
        DueOperation(
            "upserts", "rewrite_deletes", RewriteDeletesSettings(min_delete_files=2), 0, None
        )
    ]
    report = run_maintenance(spark, str(table), rewrite)
    print(f"rewrite_deletes: {report.summary_line()}")
    states.append(measure(spark, table, "after rewrite_deletes"))
    compact = [DueOperation("upserts", "compact", CompactSettings(min_input_files=2), 0, None)]
    report = run_maintenance(spark, str(table), compact)
    print(f"compact: {report.summary_line()}")
    states.append(measure(spark, table, "after rewrite_deletes + compact"))
    assert len({(s["rows"], s["sum"]) for s in states}) == 1, states
    return states


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--rows", type=int, default=5000, help="rows per small commit")
    parser.add_argument("--merges", type=int, default=10)
    parser.add_argument("--upsert-rows", type=int, default=500_000)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="tableflow-maint-") as work:
        spark = build_spark_session(
            "local[2]",
            "tableflow-maintenance-bench",
            catalogs={"bench": {"type": "hadoop", "warehouse": str(Path(work) / "wh")}},
        )
        spark.sql("CREATE NAMESPACE IF NOT EXISTS bench.bench")
        appends = append_table(spark, args.commits, args.rows)
        show(appends)
        if args.merges:
            upserts = upsert_table(spark, args.merges, args.upsert_rows)
            show(upserts)
        spark.stop()


if __name__ == "__main__":
    main()
