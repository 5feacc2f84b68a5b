"""Ingest throughput: `tableflow apply` (the CLI users run) vs a single-process baseline.

    .venv/bin/python benchmarks/ingest.py [--records 1000000] [--partitions 4] [--cores 2]

Starts its own noida-db broker and dev schema registry (127.0.0.1, free ports), produces
N Confluent-framed Avro records of 10 fields, then measures in the same run:
- baseline: one Python process, confluent-kafka consume (assign all partitions) +
  fastavro decode + pyarrow Parquet write (zstd);
- tableflow: `python -m tableflow_core apply --auto-approve` as its own process, on a
  project written to a tmp dir (embedded catalog, Spark local[cores], the six `_kafka_*`
  metadata columns): interpreter and Spark start-up, plan, table creation, the pipeline
  (read ranges -> decode -> route bad records -> write -> publish) and the commit; the
  wall-clock time of the whole command. Then N more records and a second `apply` on the
  existing table (again a new process: what a cron-driven apply pays).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from event_schema import SCHEMA  # benchmarks/ is on sys.path when a script runs

from tableflow_core.dev import broker
from tableflow_core.dev.processes import free_port
from tableflow_core.dev.registry import registry_url, start_registry
from tableflow_core.kafka.admin import LARGE_RECEIVE_LIMIT, get_watermarks
from tableflow_core.schemas.formats import METADATA_COLUMNS

HOST = "127.0.0.1"


def record(i: int) -> dict[str, object]:
    return {
        "id": i, "user": f"user-{i % 5000}", "amount": i * 0.25, "qty": i % 100,
        "active": i % 2 == 0, "at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
        "city": None if i % 7 == 0 else f"city-{i % 300}", "score": (i % 1000) / 10.0,
        "kind": "ABC"[i % 3], "day": dt.date(2026, 1, 1) + dt.timedelta(days=i % 365),
    }  # fmt: skip


class AvroFramer:
    """Confluent wire format for `topic`'s value: magic byte, schema id, Avro body."""

    def __init__(self, url: str, topic: str) -> None:
        schema_id = SchemaRegistryClient({"url": url}).register_schema(
            f"{topic}-value", Schema(json.dumps(SCHEMA), "AVRO")
        )
        self.header = struct.pack(">bI", 0, schema_id)
        self.schema = fastavro.parse_schema(SCHEMA)

    def frame(self, value: dict[str, object]) -> bytes:
        buffer = io.BytesIO()
        buffer.write(self.header)
        fastavro.schemaless_writer(buffer, self.schema, value)
        return buffer.getvalue()


@contextlib.contextmanager
def stack(work: Path) -> Iterator[tuple[str, str]]:
    """A noida-db broker and a dev registry on free loopback ports: (bootstrap, registry url)."""
    kafka_port, registry_port = free_port(HOST), free_port(HOST)
    kafka = broker.start_broker(HOST, kafka_port, work / "noida", work / "noida.log")
    try:
        registry = start_registry(HOST, registry_port, work / "registry.db", work / "registry.log")
        try:
            yield f"{HOST}:{kafka_port}", registry_url(HOST, registry_port)
        finally:
            registry.stop()
    finally:
        kafka.stop()


def produce(bootstrap: str, url: str, topic: str, records: int, partitions: int) -> int:
    """Produce `records` framed Avro values; returns the payload bytes."""
    framer = AvroFramer(url, topic)
    producer = Producer(broker.producer_config(bootstrap))
    total = 0
    for i in range(records):
        value = framer.frame(record(i))
        total += len(value)
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)
    return total


def baseline(bootstrap: str, url: str, topic: str, out_dir: Path) -> tuple[float, int]:
    """consume + fastavro decode + Parquet write in one process; returns (seconds, rows)."""
    started = time.perf_counter()
    watermarks = get_watermarks({"bootstrap.servers": bootstrap}, topic)
    client = SchemaRegistryClient({"url": url})
    writers: dict[int, object] = {}
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "baseline", "enable.auto.commit": False,
        "receive.message.max.bytes": LARGE_RECEIVE_LIMIT,
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, p, low) for p, (low, _) in watermarks.items()])
    remaining = {p: high for p, (_, high) in watermarks.items() if high > 0}
    rows: list[dict[str, object]] = []
    writer: pq.ParquetWriter | None = None
    written = 0
    while remaining:
        for msg in consumer.consume(10_000, timeout=1.0):
            if msg.error():
                continue
            value = msg.value()
            (schema_id,) = struct.unpack(">I", value[1:5])
            if schema_id not in writers:
                writers[schema_id] = fastavro.parse_schema(
                    json.loads(client.get_schema(schema_id).schema_str)
                )
            rows.append(fastavro.schemaless_reader(io.BytesIO(value[5:]), writers[schema_id], None))  # type: ignore[arg-type]
            if msg.offset() + 1 >= remaining.get(msg.partition(), 0):
                remaining.pop(msg.partition(), None)
        if len(rows) >= 100_000 or (not remaining and rows):
            table = pa.Table.from_pylist(rows)
            if writer is None:
                writer = pq.ParquetWriter(
                    out_dir / "baseline.parquet", table.schema, compression="zstd"
                )
            writer.write_table(table)
            written += len(rows)
            rows = []
    if writer is not None:
        writer.close()
    consumer.close()
    return time.perf_counter() - started, written


def write_project(
    root: Path, bootstrap: str, url: str, topic: str, cores: int, **table_keys: Any
) -> Path:
    """A one-table project (`events` reading `topic`, plus `table_keys`) with the embedded
    catalog, as `tableflow init` makes them."""
    table = {"name": "events", "topic": topic, **table_keys}
    return write_tables_project(root, bootstrap, url, cores, [table])


def write_tables_project(
    root: Path, bootstrap: str, url: str, cores: int, tables: list[dict[str, Any]]
) -> Path:
    """A project of `tables` (table YAML mappings) in namespace `bench`, embedded catalog."""
    root.mkdir(parents=True, exist_ok=True)
    project = {
        "name": "bench",
        "default_target": "bench",
        "targets": {
            "bench": {
                "kafka": {
                    "bootstrap_servers": bootstrap,
                    "config": {"receive.message.max.bytes": LARGE_RECEIVE_LIMIT},
                },
                "schema_registry": {"url": url},
                "catalog": {
                    "type": "embedded",
                    "warehouse": str(root / "warehouse"),
                    "port": free_port(HOST),
                    # As `tableflow init` writes it. With client_credentials and no secret,
                    # each in-process server draws its own, and `tableflow run`'s warm Spark
                    # session is refused from its second cycle on ("Invalid bearer token").
                    "auth": {"mode": "none"},
                },
                "spark": {"master": f"local[{cores}]"},
            }
        },
        "defaults": {"namespace": "bench"},
    }
    (root / "tableflow_project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
    (root / "tables").mkdir(exist_ok=True)
    (root / "tables" / "tables.yml").write_text(yaml.safe_dump({"tables": tables}))
    return root


def tableflow_command(root: Path, *args: str) -> list[str]:
    """The CLI as users run it, in a new process."""
    return [sys.executable, "-m", "tableflow_core", "--project-dir", str(root), *args]


def cli(root: Path, *args: str) -> float:
    """Run `tableflow ARGS` on the project in a new process; its wall seconds."""
    started = time.perf_counter()
    done = subprocess.run(
        tableflow_command(root, *args), capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(
            f"tableflow {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return seconds


def run_results(root: Path) -> dict[str, Any]:
    return dict(json.loads((root / "target" / "run_results.json").read_text()))


def cli_apply(root: Path) -> tuple[float, dict[str, object]]:
    """`tableflow apply --auto-approve` in a new process: (wall seconds, its table result)."""
    seconds = cli(root, "apply", "--auto-approve")
    return seconds, run_results(root)["tables"][0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tf-bench-"))
    kafka_port, registry_port = free_port(HOST), free_port(HOST)
    kafka = broker.start_broker(HOST, kafka_port, work / "noida", work / "noida.log")
    registry = start_registry(HOST, registry_port, work / "registry.db", work / "registry.log")
    try:
        bootstrap, url = f"{HOST}:{kafka_port}", registry_url(HOST, registry_port)
        topic = "bench_events"
        broker.create_topics(bootstrap, {topic: args.partitions})
        started = time.perf_counter()
        payload = produce(bootstrap, url, topic, args.records, args.partitions)
        print(f"produced {args.records:,} records, {payload / 1e6:.1f} MB payload "
              f"({payload / args.records:.0f} B/record) in {time.perf_counter() - started:.1f}s")  # fmt: skip
        load_before = os.getloadavg()

        base_s, base_rows = baseline(bootstrap, url, topic, work)
        assert base_rows == args.records, base_rows

        root = write_project(
            work / "project",
            bootstrap,
            url,
            topic,
            args.cores,
            metadata_columns=list(METADATA_COLUMNS),
        )
        first_s, first = cli_apply(root)
        assert first["records_written"] == args.records, first
        produce(bootstrap, url, topic, args.records, args.partitions)
        second_s, second = cli_apply(root)
        assert second["records_written"] == args.records, second

        def line(name: str, seconds: float) -> str:
            return (f"{name:<52} {seconds:7.2f} s  {args.records / seconds:>10,.0f} records/s  "
                    f"{payload / seconds / 1e6:6.1f} MB/s  ratio {base_s / seconds:4.2f}")  # fmt: skip

        load_after = os.getloadavg()
        print(f"load average before measuring: {load_before[0]:.2f}, after: {load_after[0]:.2f} "
              f"({os.cpu_count()} cores)")  # fmt: skip
        print(line("baseline (1 process, consume+decode+Parquet)", base_s))
        print(line(f"tableflow apply, new table (CLI, local[{args.cores}])", first_s))
        print(line("tableflow apply, existing table (CLI)", second_s))
        print(f"engine time inside apply (run_results): first {first['duration_s']:.2f} s, "
              f"second {second['duration_s']:.2f} s")  # fmt: skip
        print(f"ratio tableflow/baseline: new table {base_s / first_s:.2f}, "
              f"existing table {base_s / second_s:.2f}")  # fmt: skip
    finally:
        kafka.stop()
        registry.stop()


if __name__ == "__main__":
    main()
