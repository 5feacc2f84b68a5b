"""Kafka dead-letter topics on the broker: does one exist, and creating a missing one.

`topic_partitions` is what plan asks (through `plan.world.Readers`); `create_dlq_topic`
is what apply runs for a plan's `create_topic` action (plan/dead_letter_topic.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from tableflow_core.deadletter.errors import DeadLetterError
from tableflow_core.kafka.admin import (
    BrokerErrors,
    KafkaMetadataError,
    admin_conf,
    brokers_of,
    consumer_conf,
    topic_metadata,
)

# -1: the broker's default replication factor (Kafka 2.4+, KIP-464).
BROKER_DEFAULT_REPLICATION = -1


class DeadLetterTopicError(DeadLetterError):
    """The Kafka dead-letter topic could not be created."""


def topic_partitions(kafka_conf: Mapping[str, str], topic: str, timeout: float) -> int | None:
    """The topic's partition count, or None when the broker does not have it."""
    from confluent_kafka import Consumer, KafkaError

    errors = BrokerErrors()
    consumer = Consumer(consumer_conf(kafka_conf, error_cb=errors))
    try:
        found = topic_metadata(
            consumer, topic, timeout, brokers_of(kafka_conf), "dead-letter topic", errors
        )
    finally:
        consumer.close()
    if found is None or not found.partitions:
        return None
    if found.error is not None:
        if found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return None
        raise KafkaMetadataError(
            f"dead-letter topic {topic!r} on broker(s) {brokers_of(kafka_conf)}: {found.error}"
        )
    return len(found.partitions)


def create_dlq_topic(
    kafka_conf: Mapping[str, str], topic: str, partitions: int, timeout: float = 30.0
) -> bool:
    """Create the topic (broker default replication); False when it exists already."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(admin_conf(kafka_conf))
    new = NewTopic(topic, num_partitions=partitions, replication_factor=BROKER_DEFAULT_REPLICATION)
    future = admin.create_topics([new], operation_timeout=timeout, request_timeout=timeout)[topic]
    try:
        future.result(timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0]
        if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise DeadLetterTopicError(
            f"cannot create dead-letter topic {topic!r} ({partitions} partitions) on broker(s) "
            f"{brokers_of(kafka_conf)}: {error}"
        ) from exc
    return True
