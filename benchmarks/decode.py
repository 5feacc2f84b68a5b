"""Decode throughput: tableflow's Avro decoder vs plain fastavro + from_pylist, same run.

    .venv/bin/python benchmarks/decode.py [--records 100000] [--batch 10000]

Records are ~10-field Avro values in Confluent framing (mock registry, in process).
Baseline: what a hand-written consumer does per record (fastavro schemaless_reader with
the standard logical types -> datetime objects) then `RecordBatch.from_pylist`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import time
import uuid

import fastavro
import pyarrow as pa
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from event_schema import SCHEMA  # benchmarks/ is on sys.path when a script runs

from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.schemas.decoding import DecoderSpec, build_decoder, serialize_schema
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import resolve_schema


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000)
    args = parser.parse_args()

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
        for i in range(args.records)
    ]
    messages = [KafkaMessage(topic, 0, i, 0, None, p) for i, p in enumerate(payloads)]
    size = sum(len(p or b"") for p in payloads) / len(payloads)

    target = resolve_schema(topic, FormatSpec(format="avro"), None, (), registry).arrow_schema
    parsed = fastavro.parse_schema(SCHEMA)
    start = time.perf_counter()
    for i in range(0, len(payloads), args.batch):
        rows = [
            fastavro.schemaless_reader(io.BytesIO(p[5:]), parsed)
            for p in payloads[i : i + args.batch]
        ]  # type: ignore[index]
        pa.RecordBatch.from_pylist(rows, schema=target)
    baseline = time.perf_counter() - start

    decoder = build_decoder(
        DecoderSpec(
            topic,
            FormatSpec(format="avro"),
            None,
            ("partition", "offset", "timestamp"),
            registry,
            serialize_schema(
                resolve_schema(
                    topic,
                    FormatSpec(format="avro"),
                    None,
                    ("partition", "offset", "timestamp"),
                    registry,
                ).arrow_schema
            ),
        )
    )
    start = time.perf_counter()
    rows_out = 0
    for i in range(0, len(messages), args.batch):
        result = decoder.decode(messages[i : i + args.batch])
        assert not result.failures
        rows_out += result.batch.num_rows
    ours = time.perf_counter() - start
    assert rows_out == args.records

    n = args.records
    print(
        f"{n} Avro records, {len(SCHEMA['fields'])} fields, {size:.0f} bytes each, batches of {args.batch}"
    )
    print(f"baseline fastavro + from_pylist      : {n / baseline:>10,.0f} records/s")
    print(
        f"tableflow decoder (+3 metadata cols) : {n / ours:>10,.0f} records/s  ({baseline / ours:.2f}x baseline)"
    )


if __name__ == "__main__":
    main()
