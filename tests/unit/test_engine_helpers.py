"""Shared helpers for the engine tests (no tests here).

`produce_avro` writes Confluent-framed Avro with a schema registered in the real
registry; `duckdb_connection` is the independent reader.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Sequence
from typing import Any

import fastavro
import pyarrow as pa
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

# DuckDB with its extensions loaded from their wheels (the product's loader; DuckDB reads).
from tableflow_core.readers.duckdb_reader import duckdb_connection as duckdb_connection


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


def test_root_cause_finds_the_executor_error_inside_a_spark_trace() -> None:
    from tableflow_core.pipeline.run import root_cause

    spark_text = (
        "\n  An error occurred while calling o123.append.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 failed\n"
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/x/range_reader.py", line 61, in read_range\n'
        "tableflow_core.kafka.range_reader.KafkaReadError: topic 'pay' partition 1 range [0, 20): "
        "Offset out of range\n"
        "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(X.scala:1)\n"
    )
    assert root_cause(RuntimeError(spark_text)) == (
        "KafkaReadError: topic 'pay' partition 1 range [0, 20): Offset out of range"
    )
    plain = "java.lang.IllegalStateException: Cannot write to table\n\tat org.x.Y(Y.java:1)"
    assert (
        root_cause(RuntimeError(plain)) == "java.lang.IllegalStateException: Cannot write to table"
    )
    assert root_cause(RuntimeError("")) == "RuntimeError"
