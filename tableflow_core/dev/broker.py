"""The development Kafka-protocol broker: noida-db, started as a background process.

noida-db ignores the consumer's fetch size limits (`fetch.max.bytes`,
`max.partition.fetch.bytes`): one fetch can return a whole partition's log, and
librdkafka silently drops (and retries forever) any response above
`receive.message.max.bytes`. `consumer_config()` therefore raises that limit;
use it (or set the same key) for every consumer that talks to noida-db.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tableflow_core.dev.processes import BackgroundProcess, start_background

BROKER_NAME = "kafka"
# librdkafka's maximum; noida-db may answer one fetch with a whole partition.
RECEIVE_MESSAGE_MAX_BYTES = 2_147_483_647


def find_noida_binary() -> Path:
    """The noida-db executable: the one inside the installed package, else next to Python, else PATH."""
    with contextlib.suppress(ModuleNotFoundError, FileNotFoundError, TypeError):
        packaged = Path(str(resources.files("noida_db").joinpath("noida-db")))
        if packaged.is_file():
            if not os.access(packaged, os.X_OK):
                with contextlib.suppress(OSError):
                    packaged.chmod(0o755)
            if os.access(packaged, os.X_OK):
                return packaged
    beside_python = Path(sys.executable).parent / "noida-db"
    if beside_python.is_file():
        return beside_python
    on_path = shutil.which("noida-db")
    if on_path:
        return Path(on_path)
    raise FileNotFoundError(
        "noida-db not found (install the project's dependencies: pip install noida-db==0.2.3)"
    )


def broker_command(host: str, port: int, data_dir: Path) -> list[str]:
    return [
        str(find_noida_binary()),
        "start",
        "--host",
        host,
        "--only",
        "kafka",
        "--kafka-port",
        str(port),
        "--data-dir",
        str(data_dir),
    ]


def start_broker(
    host: str, port: int, data_dir: Path, log_file: Path, timeout: float = 30.0
) -> BackgroundProcess:
    """Start noida-db (Kafka only) and wait until it answers Kafka metadata requests."""
    data_dir.mkdir(parents=True, exist_ok=True)
    process = start_background(
        BROKER_NAME, broker_command(host, port, data_dir), host, port, log_file, timeout=timeout
    )
    try:
        wait_for_kafka(f"{host}:{port}", timeout=timeout)
    except RuntimeError:
        process.stop(timeout=5)
        raise
    return process


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
    bootstrap: str, topics: Mapping[str, int], replication_factor: int = 1, timeout: float = 30.0
) -> list[str]:
    """Create `{topic: partitions}`; existing topics are left alone. Returns the ones created."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
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
    """librdkafka consumer settings that work against noida-db (and any real broker)."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "receive.message.max.bytes": RECEIVE_MESSAGE_MAX_BYTES,
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
