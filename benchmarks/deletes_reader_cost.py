"""What a reader's full scan of an Iceberg table pays for position deletes, by their shape:
how many rows live in data files that carry deletes, how many rows are deleted, how many
delete files each data file has, how big the data files are. No Kafka, no Spark: tables
are built with pyiceberg (SqlCatalog on a temporary folder), their position delete files
written and committed the way tableflow's upsert writes them (pipeline/upsert_rows.
write_position_deletes, engine/row_delta.RowDelta), then scanned in full by pyiceberg
(`scan().to_arrow()`) and DuckDB (`iceberg_scan`), the best of `--repeats`, each as a ratio
to the same table's scan without deletes measured in the same run.

    .venv/bin/python benchmarks/deletes_reader_cost.py [--rows 1000000] [--repeats 3]

What it showed (docs/maintenance.md, "Delete files in check"): pyiceberg's overhead
follows the rows of the data files that carry deletes (its position-delete path builds a
position array, a hash set of the file's deletes and a copy of every batch of such a
file), hardly the number of deleted rows or of delete files; DuckDB's follows the number of
delete files.
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
from repo_root import ROOT  # noqa: F401  (the repo on sys.path)
from upsert import initial_rows

from tableflow_core.engine.row_delta import RowDelta
from tableflow_core.pipeline.upsert_rows import write_position_deletes
from tableflow_core.readers.duckdb_reader import duckdb_connection


def build(catalog: Any, name: str, rows: int, files: int) -> Any:
    """A table of `rows` rows (benchmarks/upsert.py's initial rows) in `files` data files."""
    data = initial_rows(rows)
    table = catalog.create_table(f"bench.{name}", data.schema)
    per_file = -(-rows // files)
    with table.transaction() as tx:
        for start in range(0, rows, per_file):
            tx.append(data.slice(start, per_file))
    return catalog.load_table(f"bench.{name}")


def add_deletes(
    table: Any, share_of_files: float, deleted_share: float, delete_files: int, seed: int
) -> Any:
    """Position deletes on the first `share_of_files` of the data files: `deleted_share`
    of each such file's rows, random, spread over `delete_files` delete files per data
    file (one commit each, as successive upsert batches)."""
    rng = np.random.default_rng(seed)
    tasks = sorted(table.scan().plan_files(), key=lambda t: t.file.file_path)
    carrying = tasks[: max(1, round(len(tasks) * share_of_files))] if share_of_files else []
    chosen = {
        t.file.file_path: rng.choice(
            t.file.record_count, int(t.file.record_count * deleted_share), replace=False
        )
        for t in carrying
    }
    for part in range(delete_files):
        written = [
            write_position_deletes(
                table.io, table.location(), path, np.sort(pos[part::delete_files])
            )
            for path, pos in chosen.items()
            if len(pos[part::delete_files])
        ]
        with table.transaction() as tx, RowDelta(tx, table.io, written, {}, "main"):
            pass
        table = table.refresh()
    return table


def scans(table: Any, repeats: int) -> tuple[float, float, float, float]:
    """(pyiceberg wall s, pyiceberg CPU s, DuckDB wall s, DuckDB CPU s): the best of
    `repeats` full scans (CPU: this process's, every thread; steadier than the wall
    clock on a loaded machine)."""
    con = duckdb_connection()
    best = [float("inf")] * 4
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        rows = table.scan().to_arrow().num_rows
        best[0] = min(best[0], time.perf_counter() - wall)
        best[1] = min(best[1], time.process_time() - cpu)
        wall, cpu = time.perf_counter(), time.process_time()
        duck = con.execute(f"SELECT * FROM iceberg_scan('{table.metadata_location}')")
        duck_rows = duck.to_arrow_table().num_rows
        best[2] = min(best[2], time.perf_counter() - wall)
        best[3] = min(best[3], time.process_time() - cpu)
        assert duck_rows == rows, (duck_rows, rows)
    return best[0], best[1], best[2], best[3]


def main() -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tf-deletes-cost-"))
    catalog = SqlCatalog(
        "bench", uri=f"sqlite:///{work}/catalog.db", warehouse=f"file://{work}/warehouse"
    )
    catalog.create_namespace("bench")
    print(f"{args.rows:,} rows; load average {os.getloadavg()[0]:.2f}", flush=True)
    # (data files, share of files with deletes, share of their rows deleted, delete files each)
    cases = [
        (8, 1.0, 0.01, 1),
        (8, 1.0, 0.1, 1),
        (8, 1.0, 0.2, 1),
        (8, 1.0, 0.1, 2),
        (8, 1.0, 0.1, 4),
        (8, 1.0, 0.1, 8),
        (8, 0.5, 0.1, 1),
        (8, 0.25, 0.1, 1),
        (8, 0.125, 0.1, 1),
        (1, 1.0, 0.1, 1),
        (32, 1.0, 0.1, 1),
        (32, 0.25, 0.1, 1),
    ]
    clean: dict[int, Any] = {}
    print(f"{'files':>5} {'with deletes':>12} {'deleted':>8} {'del files':>9}"
          f" {'pyiceberg wall':>15} {'CPU':>6} {'DuckDB wall':>12} {'CPU':>6}")  # fmt: skip
    for n, (files, share, deleted, per_file) in enumerate(cases):
        if files not in clean:
            clean[files] = build(catalog, f"clean{files}", args.rows, files)
        table = add_deletes(build(catalog, f"t{n}", args.rows, files), share, deleted, per_file, n)
        # The table without deletes scanned in turn with it: the same load for both.
        base, got = [float("inf")] * 4, [float("inf")] * 4
        for _ in range(args.repeats):
            base = [min(a, b) for a, b in zip(base, scans(clean[files], 1), strict=True)]
            got = [min(a, b) for a, b in zip(got, scans(table, 1), strict=True)]
        ratios = [g / b for g, b in zip(got, base, strict=True)]
        print(f"{files:>5} {share:>12.0%} {deleted:>8.0%} {per_file:>9} "
              f"{got[0]:>6.3f} s {ratios[0]:.2f}x {ratios[1]:>5.2f}x "
              f"{got[2]:>5.3f} s {ratios[2]:.2f}x {ratios[3]:>5.2f}x", flush=True)  # fmt: skip
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
