"""Ingest throughput: tableflow apply (Spark + Iceberg) vs a single-process baseline, same run.

    .venv/bin/python benchmarks/ingest.py [--records 1000000] [--partitions 4] [--cores 2]

Starts its own noida-db broker and dev schema registry (127.0.0.1, free ports), produces
N Confluent-framed Avro records of 10 fields, then measures:
- baseline: one Python process, confluent-kafka consume (assign all partitions) +
  fastavro decode + pyarrow Parquet write (zstd);
- tableflow: `materialize` on Spark local[cores]: Kafka ranges read in Spark tasks,
  decoded by tableflow's decoder, written by the Iceberg runtime (Hadoop catalog on a
  tmp dir), offsets committed in the snapshot. Each run includes planning, branch,
  write and fast-forward. Reported: the first run on a new JVM (table creation and
  Python worker start-up included, as in `tableflow apply`), the same plus Spark
  start-up, and a second run of N more records in the same application (steady state).
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import struct
import tempfile
import time
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from event_schema import SCHEMA  # benchmarks/ is on sys.path when a script runs

from tableflow_core.dev import broker
from tableflow_core.dev.processes import free_port
from tableflow_core.dev.registry import registry_url, start_registry
from tableflow_core.engine.materialize import materialize
from tableflow_core.engine.spark_session import build_spark_session
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.kafka.admin import LARGE_RECEIVE_LIMIT, get_watermarks
from tableflow_core.schemas.decoding import DecoderSpec, serialize_schema
from tableflow_core.schemas.formats import METADATA_COLUMNS, FormatSpec
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import resolve_schema

HOST = "127.0.0.1"


def record(i: int) -> dict[str, object]:
    return {
        "id": i, "user": f"user-{i % 5000}", "amount": i * 0.25, "qty": i % 100,
        "active": i % 2 == 0, "at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
        "city": None if i % 7 == 0 else f"city-{i % 300}", "score": (i % 1000) / 10.0,
        "kind": "ABC"[i % 3], "day": dt.date(2026, 1, 1) + dt.timedelta(days=i % 365),
    }  # fmt: skip


def produce(bootstrap: str, url: str, topic: str, records: int, partitions: int) -> int:
    """Produce `records` framed Avro values; returns the payload bytes."""
    schema_id = SchemaRegistryClient({"url": url}).register_schema(
        f"{topic}-value", Schema(json.dumps(SCHEMA), "AVRO")
    )
    parsed = fastavro.parse_schema(SCHEMA)
    header = struct.pack(">bI", 0, schema_id)
    producer = Producer(broker.producer_config(bootstrap))
    total = 0
    for i in range(records):
        buffer = io.BytesIO()
        buffer.write(header)
        fastavro.schemaless_writer(buffer, parsed, record(i))
        value = buffer.getvalue()
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--records-per-task", type=int, default=250_000)
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

        started = time.perf_counter()
        spark = build_spark_session(
            f"local[{args.cores}]",
            catalogs={"bench": {"type": "hadoop", "warehouse": str(work / "wh")}},
        )
        spark_start_s = time.perf_counter() - started
        registry_settings = RegistrySettings(url=url)
        value = FormatSpec(format="avro")
        resolved = resolve_schema(topic, value, None, METADATA_COLUMNS, registry_settings)
        spec = IngestSpec(
            table_name="bench", catalog="bench", namespace=("bench",), table="events", topic=topic,
            decoder=DecoderSpec(topic, value, None, METADATA_COLUMNS, registry_settings,
                                serialize_schema(resolved.arrow_schema)),
            max_records_per_task=args.records_per_task,
        )  # fmt: skip
        # First run, as `tableflow apply` does it on a new JVM: the table is created, then
        # the run reads, writes and commits (Python workers and JIT start cold).
        started = time.perf_counter()
        outcome = materialize(spark, spec, {"bootstrap.servers": bootstrap})
        first_s = time.perf_counter() - started
        assert outcome.records_written == args.records, outcome
        # Second run on the same application (a scheduled refresh): steady state.
        produce(bootstrap, url, topic, args.records, args.partitions)
        started = time.perf_counter()
        outcome = materialize(spark, spec, {"bootstrap.servers": bootstrap})
        second_s = time.perf_counter() - started
        assert outcome.records_written == args.records, outcome
        count = spark.table(spec.identifier).count()
        assert count == 2 * args.records, count

        def line(name: str, seconds: float) -> str:
            return (f"{name:<48} {seconds:7.2f} s  {args.records / seconds:>10,.0f} records/s  "
                    f"{payload / seconds / 1e6:6.1f} MB/s  ratio {base_s / seconds:4.2f}")  # fmt: skip

        print(f"load average before measuring: {load_before[0]:.2f} {load_before[1]:.2f} "
              f"{load_before[2]:.2f} ({os.cpu_count()} cores)")  # fmt: skip
        print(line("baseline (1 process, consume+decode+Parquet)", base_s))
        print(line(f"tableflow first run (new table, local[{args.cores}])", first_s))
        print(line("tableflow first run + Spark start-up", first_s + spark_start_s))
        print(line("tableflow next run (steady state)", second_s))
        print(f"ratio tableflow/baseline: first run {base_s / first_s:.2f}, "
              f"steady state {base_s / second_s:.2f}")  # fmt: skip
        spark.stop()
    finally:
        kafka.stop()
        registry.stop()


if __name__ == "__main__":
    main()
