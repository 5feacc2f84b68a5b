"""Cost of mirroring an Iceberg table as Delta (`sync_delta_log`) vs planning a scan (baseline).

    .venv/bin/python benchmarks/delta_sync.py [--files 200] [--rows 1000]

A pyiceberg SqlCatalog table gets `--files` appends (one Parquet file each). Measured:
- baseline: pyiceberg `scan().plan_files()` of the current snapshot (reads the manifests);
- first sync: creates the Delta log with one add action per file;
- incremental sync after one more append (what runs after every commit);
- no-op sync (nothing changed: no Delta version written);
- sync after a full rewrite (every file removed and one added: compaction).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from tableflow_core.delta import sync_delta_log


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rows", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        catalog = SqlCatalog(
            "bench", uri=f"sqlite:///{root / 'c.db'}", warehouse=(root / "wh").as_uri()
        )
        catalog.create_namespace("b")
        schema = pa.schema([("id", pa.int64()), ("name", pa.large_string())])
        table = catalog.create_table(("b", "t"), schema)

        def batch(i: int) -> pa.Table:
            ids = range(i * args.rows, (i + 1) * args.rows)
            return pa.table({"id": list(ids), "name": [f"n{x}" for x in ids]}, schema=schema)

        for i in range(args.files):
            table.append(batch(i))
        table = catalog.load_table(("b", "t"))
        baseline, tasks = timed(lambda: list(table.scan().plan_files()))
        first, result = timed(lambda: sync_delta_log(table))
        assert result.files_added == len(tasks) == args.files
        table.append(batch(args.files))
        incremental, result = timed(lambda: sync_delta_log(table))
        assert result.files_added == 1
        noop, result = timed(lambda: sync_delta_log(table))
        assert not result.committed
        table.overwrite(table.scan().to_arrow())
        rewrite, result = timed(lambda: sync_delta_log(table))
        assert result.files_removed == args.files + 1
        print(f"table: {args.files} files x {args.rows} rows")
        print(f"baseline  plan_files           {baseline * 1000:8.1f} ms")
        print(f"first sync ({args.files} adds)       {first * 1000:8.1f} ms")
        print(f"incremental sync (1 add)       {incremental * 1000:8.1f} ms")
        print(f"no-op sync                     {noop * 1000:8.1f} ms")
        print(f"rewrite sync ({args.files + 1} removes) {rewrite * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
