"""Produce sample datasets to Kafka through the real Confluent serializers.

    result = produce_sample("orders", "127.0.0.1:9092", "http://127.0.0.1:8081", "orders", 100_000)

`value_format`: `avro` (the default) or `json_schema` register the value schema under
`<topic>-value` (TopicNameStrategy) and serialize with confluent-kafka's AvroSerializer /
JSONSerializer; `json` sends plain JSON text, no registry. Keys are plain UTF-8 strings.
`schema_version=2` produces with the evolved schema (one extra optional field), which
the registry accepts under BACKWARD compatibility.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.dev.broker import create_topics, producer_config
from tableflow_core.dev.sample_data import (
    VALUE_FORMATS,
    generate,
    json_schema_for,
    json_value,
    schema_for,
)
from tableflow_core.kafka.admin import DebugLogger
from tableflow_core.schemas.registry import REQUEST_TIMEOUT_S

_POLL_EVERY = 10_000


@dataclass(frozen=True)
class ProduceResult:
    """What landed: counts per partition and sums a test can check against the table."""

    dataset: str
    topic: str
    subject: str | None  # None: plain JSON, no registry
    schema_id: int | None
    schema_version: int | None
    records: int  # messages delivered, tombstones included
    tombstones: int
    distinct_keys: int
    per_partition: dict[int, int]
    elapsed_seconds: float
    total_amount: Decimal | None = None  # orders only
    total_quantity: int | None = None  # orders only
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def records_per_second(self) -> float:
        return self.records / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0


class _DeliveryTracker:
    """Counts delivered messages per partition; remembers the first failure."""

    def __init__(self) -> None:
        self.per_partition: Counter[int] = Counter()
        self.failures = 0
        self.first_error: KafkaError | None = None

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.failures += 1
            self.first_error = self.first_error or error
        else:
            self.per_partition[message.partition() or 0] += 1


def produce_sample(
    dataset: str,
    bootstrap: str,
    registry_url: str,
    topic: str,
    count: int,
    partitions: int = 4,
    seed: int = 0,
    schema_version: int = 1,
    registry_config: dict[str, Any] | None = None,
    producer_overrides: dict[str, Any] | None = None,
    value_format: str = "avro",
    kafka_config: dict[str, Any] | None = None,
    **dataset_options: Any,
) -> ProduceResult:
    """Create `topic` (if missing) and produce `count` records of `dataset` ("orders"/"customers").

    `dataset_options` go to the generator (customers: `distinct_customers`, `tombstone_every`).
    `registry_config` adds client settings such as `basic.auth.user.info`; `registry_url`
    is not used for plain `json`. `kafka_config`: the broker's security settings (SASL, TLS).
    """
    if value_format not in VALUE_FORMATS:
        raise ValueError(
            f"unknown value format {value_format!r}; choose {', '.join(VALUE_FORMATS)}"
        )
    records = generate(dataset, count, seed, schema_version, **dataset_options)
    create_topics(bootstrap, {topic: partitions}, client_config=kafka_config)
    client, schema, serialize = _serializer(
        value_format, dataset, schema_version, registry_url, registry_config
    )
    producer = Producer(
        producer_config(
            bootstrap,
            # librdkafka's log lines (retries while a new broker loads its coordinators)
            # go to Python logging at DEBUG, not to the console.
            logger=DebugLogger(),
            **(kafka_config or {}),
            **(producer_overrides or {}),
        )
    )
    tracker = _DeliveryTracker()
    context = SerializationContext(topic, MessageField.VALUE)
    keys: set[str] = set()
    tombstones = 0
    total_amount = Decimal(0)
    total_quantity = 0

    started = time.perf_counter()
    for index, record in enumerate(records):
        value = record.value
        if value is None:
            payload = None
            tombstones += 1
        else:
            payload = serialize(value, context)
            if dataset == "orders":
                total_amount += value["amount"]
                total_quantity += value["quantity"]
        keys.add(record.key)
        _produce(producer, topic, record.key.encode(), payload, tracker)
        if index % _POLL_EVERY == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started

    if remaining or tracker.failures:
        raise RuntimeError(
            f"producing {dataset} to topic {topic!r} on {bootstrap}: {tracker.failures} messages "
            f"failed, {remaining} still queued after flush; first error: {tracker.first_error}"
        )
    subject, schema_id, version = None, None, None
    if client is not None and schema is not None:
        subject = f"{topic}-value"
        registered = client.lookup_schema(subject, schema)
        schema_id, version = int(registered.schema_id or 0), int(registered.version or 0)
    is_orders = dataset == "orders"
    return ProduceResult(
        dataset=dataset,
        topic=topic,
        subject=subject,
        schema_id=schema_id,
        schema_version=version,
        records=sum(tracker.per_partition.values()),
        tombstones=tombstones,
        distinct_keys=len(keys),
        per_partition=dict(sorted(tracker.per_partition.items())),
        elapsed_seconds=elapsed,
        total_amount=total_amount if is_orders else None,
        total_quantity=total_quantity if is_orders else None,
    )


Serialize = Callable[[dict[str, Any], SerializationContext], bytes | None]


def _serializer(
    value_format: str,
    dataset: str,
    schema_version: int,
    registry_url: str,
    registry_config: dict[str, Any] | None,
) -> tuple[SchemaRegistryClient | None, Schema | None, Serialize]:
    """The registry client and schema (None for plain JSON) and the value serializer."""
    if value_format == "json":
        return None, None, lambda value, _context: json.dumps(json_value(value)).encode()
    client = SchemaRegistryClient(
        {"url": registry_url, "timeout": REQUEST_TIMEOUT_S, **(registry_config or {})}
    )
    if value_format == "json_schema":
        text = json.dumps(json_schema_for(dataset, schema_version))
        to_json = JSONSerializer(text, client)
        return (
            client,
            Schema(text, "JSON"),
            lambda value, context: to_json(json_value(value), context),
        )
    text = json.dumps(schema_for(dataset, schema_version))
    return client, Schema(text, "AVRO"), AvroSerializer(client, text)


def _produce(
    producer: Producer, topic: str, key: bytes, value: bytes | None, tracker: _DeliveryTracker
) -> None:
    """Produce, waiting for room when the local queue is full (never drops a record)."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, on_delivery=tracker)
            return
        except BufferError:
            producer.poll(0.05)
