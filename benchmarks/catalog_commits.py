"""Commit throughput of the REST catalog vs pyiceberg's SqlCatalog used directly (baseline).

    .venv/bin/python benchmarks/catalog_commits.py [--appends 40] [--writers 4]

Each append writes one small Parquet file and commits a snapshot, so the figures are
dominated by per-commit overhead: HTTP + auth + locking on top of the same SQLite work.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
from pydantic import SecretStr
from pyiceberg.catalog import Catalog, load_catalog

from tableflow_core.catalog import CatalogServerSettings, serve_in_background
from tableflow_core.catalog.service import open_sql_catalog

SCHEMA = pa.schema([("id", pa.int64())])
RETRIES = {
    "commit.retry.num-retries": "100",
    "commit.retry.min-wait-ms": "5",
    "commit.retry.max-wait-ms": "100",
}


def sequential_appends(catalog: Catalog, namespace: str, appends: int) -> float:
    catalog.create_namespace(namespace)
    table = catalog.create_table((namespace, "t"), SCHEMA)
    start = time.perf_counter()
    for i in range(appends):
        table.append(pa.table({"id": [i]}, schema=SCHEMA))
    return appends / (time.perf_counter() - start)


def concurrent_appends(make_catalog, namespace: str, writers: int, appends: int) -> float:  # type: ignore[no-untyped-def]
    make_catalog("setup").create_table((namespace, "c"), SCHEMA, properties=RETRIES)
    barrier = threading.Barrier(writers + 1)

    def run(writer: int) -> None:
        table = make_catalog(f"w{writer}").load_table((namespace, "c"))
        barrier.wait()
        for i in range(appends):
            table.append(pa.table({"id": [writer * 1000 + i]}, schema=SCHEMA))

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    rows = make_catalog("check").load_table((namespace, "c")).scan().to_arrow().num_rows
    assert rows == writers * appends, f"lost commits: {rows} rows, expected {writers * appends}"
    return writers * appends / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--appends", type=int, default=40)
    parser.add_argument("--writers", type=int, default=4)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="catalog-bench-"))

    direct_dir = base / "direct"
    direct_dir.mkdir()
    direct = open_sql_catalog(
        "bench", f"sqlite:///{direct_dir / 'catalog.db'}", direct_dir.as_uri()
    )
    baseline = sequential_appends(direct, "seq", args.appends)

    settings = CatalogServerSettings(
        warehouse=base / "rest",
        client_secret=SecretStr("bench-secret"),
        access_log=False,
        log_level="warning",
    )
    with serve_in_background(settings) as server:
        props = server.pyiceberg_properties()
        rest = load_catalog("bench", **props)
        rest_rate = sequential_appends(rest, "seq", args.appends)
        per_writer = max(1, args.appends // args.writers)
        concurrent_rate = concurrent_appends(
            lambda name: load_catalog(name, **props), "seq", args.writers, per_writer
        )

    print(f"sequential appends, SqlCatalog direct (baseline): {baseline:7.1f} commits/s")
    print(
        f"sequential appends, REST catalog:                 {rest_rate:7.1f} commits/s ({rest_rate / baseline:.2f}x baseline)"
    )
    print(
        f"{args.writers} concurrent writers, REST catalog:         {concurrent_rate:7.1f} commits/s, no commit lost"
    )


if __name__ == "__main__":
    main()
