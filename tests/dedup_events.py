"""A topic of Avro events {id, v}, as the dedup tests produce it (read-task dedup and the
dedup key set: tests/integration/test_read_task_dedup.py, test_dedup_index.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.fixtures.stack import KafkaBroker, unique_name

EVENT = {
    "type": "record",
    "name": "Event",
    "namespace": "tableflow.test",
    "fields": [{"name": "id", "type": "long"}, {"name": "v", "type": "string"}],
}


class EventTopic:
    """A new topic of `partitions` partitions and its Avro value serializer."""

    def __init__(
        self, broker: KafkaBroker, registry_url: str, prefix: str, partitions: int
    ) -> None:
        self.name = broker.create_topic(unique_name(prefix), partitions)
        self.bootstrap = broker.bootstrap
        self.serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}),
                                         json.dumps(EVENT))  # fmt: skip

    def send(self, events: Iterable[tuple[int | None, int, str]]) -> None:
        """(partition or None: the producer's choice, id, v) each, in this order."""
        producer = Producer({"bootstrap.servers": self.bootstrap})
        context = SerializationContext(self.name, MessageField.VALUE)
        for partition, key, value in events:
            payload = self.serializer({"id": key, "v": value}, context)
            if partition is None:
                producer.produce(self.name, payload)
            else:
                producer.produce(self.name, payload, partition=partition)
        producer.flush(30)
