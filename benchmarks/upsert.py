"""Upsert: tableflow's MERGE (merge-on-read) vs pyiceberg's `Table.upsert`, same data, same run.

    .venv/bin/python benchmarks/upsert.py [--rows 1000000] [--batch 100000] [--batches 10]

Starts its own noida-db and dev registry, produces `--rows` Avro records keyed by an Avro
key {id} (one per id) to a 4-partition topic, then measures:
- tableflow: the code `tableflow apply` runs (PlanTask + ApplyTask, one Spark application,
  embedded catalog): the initial load of the table, then a batch of `--batch` records
  (updates of existing keys, keys repeated within the batch, 10% tombstones);
- pyiceberg: the same table loaded with `append`, then the same batch applied with its
  own `Table.upsert` (last record per key, as tableflow does) and `Table.delete` for the
  tombstones. Both tables must end with the same rows (count and sum of amounts);
- scans: `--batches` more batches through tableflow (one MERGE each, position delete
  files accumulate), then a full scan (pyiceberg `to_arrow`, DuckDB `iceberg_scan`) with
  the delete files, and again after compaction (`rewrite_data_files`, deletes applied).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from event_schema import SCHEMA  # benchmarks/ is on sys.path when a script runs
from ingest import HOST, record, write_project

from tableflow_core.dev import broker
from tableflow_core.dev.processes import free_port
from tableflow_core.dev.registry import registry_url, start_registry

KEY_SCHEMA = {"type": "record", "name": "EventKey", "fields": [{"name": "id", "type": "long"}]}
PARTITIONS = 4

Change = tuple[int, dict[str, Any] | None]  # (id, value or None for a tombstone)


def batch_changes(rows: int, size: int, seed: int) -> list[Change]:
    """Updates of existing ids (some ids several times), 10% tombstones."""
    rng = random.Random(seed)
    hot = [rng.randrange(rows) for _ in range(max(1, size // 50))]
    changes: list[Change] = []
    for _ in range(size):
        key = rng.choice(hot) if rng.random() < 0.1 else rng.randrange(rows)
        if rng.random() < 0.1:
            changes.append((key, None))
        else:
            changes.append((key, {**record(key), "amount": key * 0.25 + seed, "qty": seed % 100}))
    return changes


class Topic:
    def __init__(self, bootstrap: str, url: str, name: str) -> None:
        client = SchemaRegistryClient({"url": url})
        self.name = name
        self.bootstrap = bootstrap
        self.value_header = struct.pack(
            ">bI", 0, client.register_schema(f"{name}-value", Schema(json.dumps(SCHEMA), "AVRO"))
        )
        self.key_header = struct.pack(
            ">bI", 0, client.register_schema(f"{name}-key", Schema(json.dumps(KEY_SCHEMA), "AVRO"))
        )
        self.value_schema = fastavro.parse_schema(SCHEMA)
        self.key_schema = fastavro.parse_schema(KEY_SCHEMA)

    def _frame(self, header: bytes, schema: Any, value: dict[str, Any]) -> bytes:
        buffer = io.BytesIO()
        buffer.write(header)
        fastavro.schemaless_writer(buffer, schema, value)
        return buffer.getvalue()

    def produce(self, changes: list[Change]) -> None:
        producer = Producer(broker.producer_config(self.bootstrap))
        for key, value in changes:
            payload = (
                None if value is None else self._frame(self.value_header, self.value_schema, value)
            )
            key_bytes = self._frame(self.key_header, self.key_schema, {"id": key})
            while True:
                try:
                    # one partition per key, as a keyed producer does: the latest wins
                    producer.produce(self.name, payload, key=key_bytes, partition=key % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush(120)


def tableflow_apply(root: Path, spark: Any) -> float:
    """Plan + apply, as `tableflow apply` does (on one Spark application)."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.tasks.apply import ApplyTask
    from tableflow_core.tasks.plan import PlanTask

    started = time.perf_counter()
    project = load_project(root)
    plan = PlanTask(project, project.tables).run()
    results = ApplyTask(project, plan, spark=spark).run()
    assert results.status == "success", results
    return time.perf_counter() - started


def final_rows(changes: list[Change]) -> tuple[pa.Table, list[int]]:
    """The batch reduced to its last record per id: (rows to upsert, ids to delete)."""
    last: dict[int, dict[str, Any] | None] = {}
    for key, value in changes:
        last[key] = value
    upserts = [v for v in last.values() if v is not None]
    deletes = [k for k, v in last.items() if v is None]
    return pa.Table.from_pylist(upserts), deletes


def pyiceberg_load(work: Path, rows: int) -> tuple[float, Any]:
    """(seconds, table): the same initial rows with pyiceberg's own `append`."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "bench", uri=f"sqlite:///{work}/pyiceberg.db", warehouse=f"file://{work}/pyiceberg-wh"
    )
    catalog.create_namespace("bench")
    initial = pa.Table.from_pylist([record(i) for i in range(rows)])
    started = time.perf_counter()
    table = catalog.create_table("bench.events", initial.schema)
    table.append(initial)
    return time.perf_counter() - started, table


def pyiceberg_upsert(table: Any, changes: list[Change]) -> float:
    """Seconds for pyiceberg's own `upsert` (last record per key) + `delete` (tombstones)."""
    from pyiceberg.expressions import In

    upserts, deletes = final_rows(changes)
    started = time.perf_counter()
    table.upsert(upserts.cast(table.schema().as_arrow()), join_cols=["id"])
    if deletes:
        table.delete(In("id", deletes))
    return time.perf_counter() - started


def compact(project_root: Path, spark: Any) -> None:
    """Rewrite every data file with its deletes applied (the embedded catalog runs meanwhile)."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.targets.catalog import open_catalog

    with open_catalog(load_project(project_root)):
        spark.sql(
            "CALL tableflow.system.rewrite_data_files(table => 'tableflow.bench.events', "
            "options => map('rewrite-all', 'true', 'remove-dangling-deletes', 'true'))"
        )


def scan_seconds(project_root: Path) -> tuple[float, float, int, int]:
    """(pyiceberg full scan s, DuckDB iceberg_scan s, rows, delete files)."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.readers.duckdb_reader import duckdb_connection
    from tableflow_core.targets.catalog import open_catalog

    with open_catalog(load_project(project_root)) as handle:
        table = handle.catalog.load_table("bench.events")
        started = time.perf_counter()
        rows = table.scan().to_arrow().num_rows
        pyiceberg_s = time.perf_counter() - started
        con = duckdb_connection()
        started = time.perf_counter()
        (duck_rows,) = con.execute(
            f"SELECT count(*) FROM iceberg_scan('{table.metadata_location}')"
        ).fetchone()  # type: ignore[misc]
        duck_s = time.perf_counter() - started
        assert duck_rows == rows, (duck_rows, rows)
        delete_files = sum(1 for task in table.scan().plan_files() for _ in task.delete_files)
    return pyiceberg_s, duck_s, rows, delete_files


def catalog_commits(project_root: Path) -> int:
    """The table's catalog commits so far (its metadata files, CREATE TABLE included)."""
    from tableflow_core.config.loader import load_project
    from tableflow_core.targets.catalog import open_catalog

    with open_catalog(load_project(project_root)) as handle:
        return len(handle.catalog.load_table("bench.events").metadata.metadata_log) + 1


def table_summary(project_root: Path) -> tuple[int, float]:
    from tableflow_core.config.loader import load_project
    from tableflow_core.targets.catalog import open_catalog

    with open_catalog(load_project(project_root)) as handle:
        arrow = handle.catalog.load_table("bench.events").scan().to_arrow()
        return arrow.num_rows, round(pc.sum(arrow["amount"]).as_py(), 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=10, help="batches before the scans")
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tf-upsert-"))
    kafka_port, registry_port = free_port(HOST), free_port(HOST)
    kafka = broker.start_broker(HOST, kafka_port, work / "noida", work / "noida.log")
    registry = start_registry(HOST, registry_port, work / "registry.db", work / "registry.log")
    try:
        from tableflow_core.engine.spark_session import build_spark_session

        bootstrap, url = f"{HOST}:{kafka_port}", registry_url(HOST, registry_port)
        broker.create_topics(bootstrap, {"bench_upsert": PARTITIONS})
        topic = Topic(bootstrap, url, "bench_upsert")
        topic.produce([(i, record(i)) for i in range(args.rows)])
        root = write_project(
            work / "project",
            bootstrap,
            url,
            topic.name,
            args.cores,
            mode="upsert",
            key_columns=["id"],
            key={"format": "avro"},
        )
        load_before = os.getloadavg()
        print(f"rows {args.rows:,}, batch {args.batch:,} records (10% tombstones), "
              f"{PARTITIONS} partitions, local[{args.cores}]; load average before: "
              f"{load_before[0]:.2f} ({os.cpu_count()} cores)", flush=True)  # fmt: skip
        spark = build_spark_session(f"local[{args.cores}]", "tableflow-bench")
        load_s = tableflow_apply(root, spark)
        py_load_s, py_table = pyiceberg_load(work, args.rows)
        print(f"initial load  tableflow apply {load_s:8.2f} s   pyiceberg append {py_load_s:8.2f} s",
              flush=True)  # fmt: skip

        changes = batch_changes(args.rows, args.batch, seed=1)
        topic.produce(changes)
        batch_s = tableflow_apply(root, spark)
        py_upsert_s = pyiceberg_upsert(py_table, changes)
        print(f"one batch     tableflow apply {batch_s:8.2f} s   pyiceberg upsert+delete "
              f"{py_upsert_s:8.2f} s   speed-up {py_upsert_s / batch_s:5.1f}x", flush=True)  # fmt: skip
        py_arrow = py_table.scan().to_arrow()
        ours = table_summary(root)
        theirs = (py_arrow.num_rows, round(pc.sum(py_arrow["amount"]).as_py(), 2))
        assert ours == theirs, (ours, theirs)

        batch_times = []
        commits_before = catalog_commits(root)
        for seed in range(2, args.batches + 1):
            topic.produce(batch_changes(args.rows, args.batch, seed=seed))
            batch_times.append(tableflow_apply(root, spark))
        if batch_times:
            per_batch = (catalog_commits(root) - commits_before) / len(batch_times)
            print(f"batches 2..{args.batches}: mean {sum(batch_times) / len(batch_times):.2f} s, "
                  f"{per_batch:.1f} catalog commits per batch", flush=True)  # fmt: skip
        deletes = scan_seconds(root)
        print(f"scan after {args.batches} batches (delete files): pyiceberg {deletes[0]:.2f} s, "
              f"DuckDB {deletes[1]:.2f} s ({deletes[2]:,} rows, {deletes[3]} delete files)",
              flush=True)  # fmt: skip
        compact(root, spark)
        compacted = scan_seconds(root)
        assert deletes[2] == compacted[2]
        print(f"scan after compaction:                  pyiceberg {compacted[0]:.2f} s, "
              f"DuckDB {compacted[1]:.2f} s ({compacted[3]} delete files)")  # fmt: skip
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        spark.stop()
    finally:
        kafka.stop()
        registry.stop()


if __name__ == "__main__":
    main()
