"""Decode throughput on one core, against a baseline measured in the same run.

    .venv/bin/python benchmarks/decode.py [--records 100000] [--batch 10000]
        [--kafka-records 250000] [--chunk 50000] [--repeat 3] [--against REV] [--no-kafka]

Records are the 10-field Avro events of `event_schema.py` in Confluent framing. Figures are
CPU time (`time.process_time()`: the whole process, librdkafka's threads included), the
best of `--repeat` runs, so a busy shared machine does not skew them; wall time is shown
beside.

1. In memory (mock registry): tableflow's decoder (+3 metadata columns) vs what a
   hand-written consumer does per record: fastavro `schemaless_reader` with the standard
   logical types, then `RecordBatch.from_pylist`.
2. The in-task path of `tableflow apply` (unless `--no-kafka`): starts its own Apache Kafka
   broker and dev registry (127.0.0.1, free ports), produces `--kafka-records` records to
   one partition, then measures, in us of CPU per record:
   - baseline: confluent-kafka consume + fastavro + `from_pylist` per chunk;
   - `read_range` alone (the consume loop building KafkaMessages);
   - `read_range` + `ChunkDecoder.decode` with all six `_kafka_*` metadata columns: what
     each Spark task of the decode stage runs (`pipeline/runners/decode.py::_mapper`).
   `--against REV` measures the same in-task path with tableflow_core as of git revision
   REV (a `git archive` copy in a temp dir) against the same broker: before/after.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from event_schema import SCHEMA  # benchmarks/ is on sys.path when a script runs

from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.schemas.formats import METADATA_COLUMNS, FormatSpec
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import resolve_schema
from tests.decoders import resolved_decoder

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parent.parent


def best(repeat: int, run: Callable[[], int]) -> tuple[float, float, int]:
    """(CPU seconds, wall seconds, records) of the run with the least CPU."""
    figures = []
    for _ in range(repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        records = run()
        figures.append((time.process_time() - cpu, time.perf_counter() - wall, records))
    return min(figures)


def in_memory(records: int, batch: int, repeat: int) -> None:
    registry = RegistrySettings(url=f"mock://{uuid.uuid4().hex}")
    topic = "bench"
    serializer = AvroSerializer(registry.client(), json.dumps(SCHEMA))
    ctx = SerializationContext(topic, MessageField.VALUE)
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    payloads = [
        serializer(
            {
                "id": i,
                "user": f"user-{i % 1000}",
                "amount": i * 0.5,
                "qty": i % 97,
                "active": i % 2 == 0,
                "at": at + dt.timedelta(seconds=i),
                "city": None if i % 3 else "Oslo",
                "score": 0.5,
                "kind": "B",
                "day": dt.date(2024, 1, 1),
            },
            ctx,
        )
        for i in range(records)
    ]
    messages = [KafkaMessage(topic, 0, i, 0, None, p) for i, p in enumerate(payloads)]
    size = sum(len(p or b"") for p in payloads) / len(payloads)

    target = resolve_schema(topic, FormatSpec(format="avro"), None, (), registry).arrow_schema
    parsed = fastavro.parse_schema(SCHEMA)

    def baseline() -> int:
        for i in range(0, len(payloads), batch):
            rows = [
                fastavro.schemaless_reader(io.BytesIO(p[5:]), parsed, None)  # type: ignore[index,arg-type]
                for p in payloads[i : i + batch]
            ]
            pa.RecordBatch.from_pylist(rows, schema=target)
        return len(payloads)

    metadata = ("partition", "offset", "timestamp")
    decoder, _ = resolved_decoder(topic, FormatSpec(format="avro"), None, metadata, registry)

    def ours() -> int:
        rows_out = 0
        for i in range(0, len(messages), batch):
            result = decoder.decode(messages[i : i + batch])
            assert not result.failures
            rows_out += result.batch.num_rows
        return rows_out

    base_cpu, _, _ = best(repeat, baseline)
    ours_cpu, _, rows_out = best(repeat, ours)
    assert rows_out == records
    print(
        f"in memory: {records} Avro records, {len(SCHEMA['fields'])} fields, {size:.0f} bytes "
        f"each, batches of {batch} (CPU, best of {repeat})"
    )
    print(f"  baseline fastavro + from_pylist      : {records / base_cpu:>10,.0f} records/s")
    print(
        f"  tableflow decoder (+3 metadata cols) : {records / ours_cpu:>10,.0f} records/s  "
        f"({base_cpu / ours_cpu:.2f}x baseline)"
    )


def measure(bootstrap: str, url: str, topic: str, end: int, chunk: int, repeat: int) -> dict:
    """The in-task figures with whichever tableflow_core is on sys.path: {name: (cpu, wall)}."""
    from confluent_kafka import Consumer, TopicPartition

    from tableflow_core.kafka.offsets import OffsetRange
    from tableflow_core.kafka.range_reader import read_range
    from tableflow_core.pipeline import decode_chunks
    from tableflow_core.schemas.decoding import DecoderSpec as Spec
    from tableflow_core.schemas.decoding import build_decoder as build
    from tableflow_core.schemas.decoding import serialize_schema as serialize
    from tableflow_core.schemas.formats import FormatSpec as Format
    from tableflow_core.schemas.registry import RegistrySettings as Registry
    from tableflow_core.schemas.resolve import resolve_schema as resolve

    kafka_conf = {"bootstrap.servers": bootstrap}
    registry = Registry(url=url)
    value = Format(format="avro")
    target = resolve(topic, value, None, METADATA_COLUMNS, registry).arrow_schema
    spec = Spec(topic, value, None, METADATA_COLUMNS, registry, serialize(target))
    offsets = OffsetRange(topic, 0, 0, end)
    parsed = fastavro.parse_schema(SCHEMA)
    plain = resolve(topic, value, None, (), registry).arrow_schema

    def baseline() -> int:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "baseline",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        rows: list[Any] = []
        done = 0
        while done < end:
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error():
                    continue
                rows.append(fastavro.schemaless_reader(io.BytesIO(msg.value()[5:]), parsed, None))  # type: ignore[arg-type,index]
                done = msg.offset() + 1
            if len(rows) >= chunk or (done >= end and rows):
                pa.RecordBatch.from_pylist(rows, schema=plain)
                rows = []
        consumer.close()
        return done

    # What the decode stage's Spark task wraps its loop in (revisions before it: nothing).
    task_context = getattr(decode_chunks, "fewer_gc_passes", contextlib.nullcontext)

    def read_only() -> int:
        with task_context():
            return sum(len(messages) for messages in read_range(kafka_conf, offsets, chunk))

    def read_and_decode() -> int:
        chunks = decode_chunks.ChunkDecoder(build(spec), target, None, "bench")
        rows = 0
        with task_context():
            for messages in read_range(kafka_conf, offsets, chunk):
                for batch in chunks.decode(messages):
                    rows += batch.num_rows
        return rows

    figures = {}
    for name, run in (
        ("baseline", baseline),
        ("read_range", read_only),
        ("read_range+decode", read_and_decode),
    ):
        cpu, wall, records = best(repeat, run)
        assert records == end, (name, records, end)
        figures[name] = (cpu, wall)
    return figures


def measure_against(rev: str, args: list[str]) -> dict:
    """`measure` with tableflow_core of git revision `rev`, in a child process."""
    with tempfile.TemporaryDirectory(prefix="tf-decode-before-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev, "tableflow_core"],
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        env = {**os.environ, "PYTHONPATH": tmp}
        done = subprocess.run(
            [sys.executable, __file__, "--measure", *args],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def in_task(records: int, chunk: int, repeat: int, against: str | None) -> None:
    from ingest import produce, servers  # benchmarks/ is on sys.path when a script runs

    from tableflow_core.dev import broker

    work = Path(tempfile.mkdtemp(prefix="tf-bench-decode-"))
    try:
        with servers(work) as (bootstrap, url):
            topic = "bench_events"
            broker.create_topics(bootstrap, {topic: 1})
            payload = produce(bootstrap, url, topic, records, 1)
            load = os.getloadavg()[0]
            args = [bootstrap, url, topic, str(records), str(chunk), str(repeat)]
            figures = measure(bootstrap, url, topic, records, chunk, repeat)
            before = measure_against(against, args) if against else None
            print(
                f"in task: {records:,} records on one partition, {payload / records:.0f} B each, "
                f"chunks of {chunk:,}, all six _kafka_* metadata columns; us of CPU per record "
                f"(best of {repeat}; wall in brackets; load average {load:.2f}, {os.cpu_count()} cores)"
            )
            base_cpu = figures["baseline"][0]
            for name, (cpu, wall) in figures.items():
                line = (
                    f"  {name:<18} {cpu * 1e6 / records:6.2f} us/record  "
                    f"({wall * 1e6 / records:6.2f})  {cpu / base_cpu:4.2f}x baseline CPU"
                )
                if before and name != "baseline":
                    old = before[name][0]
                    line += f"   at {against}: {old * 1e6 / records:6.2f} us/record ({old / cpu:.2f}x now)"
                print(line)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        bootstrap, url, topic, end, chunk, repeat = sys.argv[2:8]
        print(json.dumps(measure(bootstrap, url, topic, int(end), int(chunk), int(repeat))))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--kafka-records", type=int, default=250_000)
    parser.add_argument("--chunk", type=int, default=50_000, help="decode_chunk_size")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", metavar="REV", help="also measure git revision REV")
    parser.add_argument("--no-kafka", action="store_true", help="only the in-memory part")
    args = parser.parse_args()
    in_memory(args.records, args.batch, args.repeat)
    if not args.no_kafka:
        in_task(args.kafka_records, args.chunk, args.repeat, args.against)


if __name__ == "__main__":
    main()
