"""Shared helpers for the engine tests (no tests here).

`produce_avro` writes Confluent-framed Avro with a schema registered in the real
registry. `InterimDecoderSpec`/`interim_decoder` are a tiny decoder with the
DECODING contract's shape (decode(messages) -> result with .batch and .failures),
used until tableflow_core.schemas.decoding lands.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import fastavro
import pyarrow as pa
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from tableflow_core.kafka.messages import KafkaMessage


def avro_schema(version: int = 1) -> dict[str, Any]:
    fields: list[dict[str, Any]] = [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "amount", "type": "double"},
    ]
    if version >= 2:
        fields.append({"name": "country", "type": ["null", "string"], "default": None})
    return {"type": "record", "name": "Payment", "namespace": "tableflow.test", "fields": fields}


def target_schema(version: int = 1) -> pa.Schema:
    fields = [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("amount", pa.float64(), nullable=False),
    ]
    if version >= 2:
        fields.append(pa.field("country", pa.string()))
    fields += [pa.field("_kafka_partition", pa.int32()), pa.field("_kafka_offset", pa.int64())]
    return pa.schema(fields)


def register(registry_url: str, subject: str, schema: dict[str, Any]) -> int:
    client = SchemaRegistryClient({"url": registry_url})
    return int(client.register_schema(subject, Schema(json.dumps(schema), "AVRO")))


def frame(schema_id: int, parsed: Any, record: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    buffer.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(buffer, parsed, record)
    return buffer.getvalue()


def produce_avro(
    bootstrap: str,
    registry_url: str,
    topic: str,
    records: Sequence[dict[str, Any]],
    partitions: int,
    version: int = 1,
) -> None:
    """Records go round-robin to partitions (record i -> partition i % partitions)."""
    schema = avro_schema(version)
    schema_id = register(registry_url, f"{topic}-value", schema)
    parsed = fastavro.parse_schema(schema)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000}
    )
    for i, record in enumerate(records):
        while True:
            try:
                producer.produce(topic, frame(schema_id, parsed, record), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(60)


def produce_raw(bootstrap: str, topic: str, values: Sequence[bytes], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value, partition=partition)
    producer.flush(30)


@dataclass(frozen=True)
class InterimDecoderSpec:
    topic: str
    registry_url: str
    target_schema_ipc: bytes


@dataclass(frozen=True)
class InterimFailure:
    topic: str
    partition: int
    offset: int
    reason: str
    key: bytes | None = None
    value: bytes | None = None


@dataclass
class InterimResult:
    batch: pa.RecordBatch
    failures: list[InterimFailure] = field(default_factory=list)


class InterimDecoder:
    def __init__(self, spec: InterimDecoderSpec) -> None:
        self.spec = spec
        self.schema = pa.ipc.read_schema(pa.py_buffer(spec.target_schema_ipc))
        self.client = SchemaRegistryClient({"url": spec.registry_url})
        self.writers: dict[int, Any] = {}

    def _writer(self, schema_id: int) -> Any:
        if schema_id not in self.writers:
            text = self.client.get_schema(schema_id).schema_str
            self.writers[schema_id] = fastavro.parse_schema(json.loads(text))
        return self.writers[schema_id]

    def decode(self, messages: Sequence[KafkaMessage]) -> InterimResult:
        rows: list[dict[str, Any]] = []
        failures: list[InterimFailure] = []
        for msg in messages:
            value = msg.value or b""
            try:
                if len(value) < 5 or value[0] != 0:
                    raise ValueError("wrong magic byte")
                (schema_id,) = struct.unpack(">I", value[1:5])
                record = fastavro.schemaless_reader(
                    io.BytesIO(value[5:]), self._writer(schema_id), None
                )
            except Exception as exc:
                failures.append(
                    InterimFailure(msg.topic, msg.partition, msg.offset, str(exc)[:200])
                )
                continue
            assert isinstance(record, dict)
            record["_kafka_partition"] = msg.partition
            record["_kafka_offset"] = msg.offset
            rows.append(record)
        batch = pa.RecordBatch.from_pylist(rows, schema=self.schema)
        return InterimResult(batch, failures)


def interim_decoder(spec: InterimDecoderSpec) -> InterimDecoder:
    return InterimDecoder(spec)


def duckdb_connection() -> duckdb.DuckDBPyConnection:
    """DuckDB with the avro, httpfs and iceberg extensions loaded from their wheels."""
    import importlib
    from pathlib import Path

    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    for name in ("avro", "httpfs", "iceberg"):
        package = importlib.import_module(f"duckdb_extension_{name}")
        (path,) = Path(package.__file__).parent.glob(f"extensions/*/{name}.duckdb_extension")
        con.execute(f"LOAD '{path}'")
    return con
