"""Kafka helpers for the local stack, tests and benchmarks: start a broker, create topics,
producer and consumer settings.

`start_broker` starts Apache Kafka 4.x in KRaft mode (`dev/kafka_server.py`), as
`tableflow dev up` does.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tableflow_core.dev.kafka_server import KafkaServerSettings, start_kafka
from tableflow_core.dev.processes import BackgroundProcess

BROKER_NAME = "kafka"


def start_broker(
    host: str, port: int, data_dir: Path, log_file: Path, timeout: float = 60.0
) -> BackgroundProcess:
    """Start Apache Kafka (one KRaft broker+controller, data in `data_dir`) on `port` and
    wait until it answers Kafka metadata requests."""
    server = start_kafka(
        KafkaServerSettings(data_dir=data_dir, host=host, port=port),
        log_file=log_file,
        timeout=timeout,
    )
    return server.process


def wait_for_kafka(bootstrap: str, timeout: float = 30.0) -> None:
    """Block until the broker answers a metadata request."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=2)
            return
        except KafkaException as exc:
            last_error = exc
            time.sleep(0.2)
    raise RuntimeError(
        f"Kafka broker at {bootstrap} did not answer within {timeout:.0f}s: {last_error}"
    )


def create_topics(
    bootstrap: str,
    topics: Mapping[str, int],
    replication_factor: int = 1,
    timeout: float = 30.0,
    client_config: Mapping[str, Any] | None = None,
) -> list[str]:
    """Create `{topic: partitions}`; existing topics are left alone. Returns the ones created.

    `client_config`: security settings (SASL, TLS) added to the admin client's."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client_config or {})})
    futures = admin.create_topics(
        [
            NewTopic(name, num_partitions=parts, replication_factor=replication_factor)
            for name, parts in topics.items()
        ],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    created = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
            created.append(name)
        except KafkaException as exc:
            error = exc.args[0]
            if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise RuntimeError(f"could not create topic {name!r} on {bootstrap}: {error}") from exc
    return created


def consumer_config(
    bootstrap: str, group_id: str | None = None, **overrides: Any
) -> dict[str, Any]:
    """librdkafka consumer settings for tests and tools: no auto commit, from the start."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if group_id is not None:
        config["group.id"] = group_id
    config.update(overrides)
    return config


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """Throughput-oriented producer settings: batching, a large local queue, lz4."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 20,
        "batch.num.messages": 10_000,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "compression.type": "lz4",
        "enable.idempotence": True,
    }
    config.update(overrides)
    return config
