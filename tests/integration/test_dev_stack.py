"""`up` / `status` / `down` of the local stack, for real, on free ports in a tmp project."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from tableflow_core.dev import broker
from tableflow_core.dev.processes import free_port, pid_is_alive, stop_pid
from tableflow_core.dev.stack import (
    CATALOG,
    KAFKA,
    REGISTRY,
    StackError,
    StackSettings,
    down,
    status,
    up,
)

SCHEMA = json.dumps({"type": "record", "name": "Ping", "fields": [{"name": "n", "type": "int"}]})


@pytest.fixture
def settings(tmp_path: Path) -> StackSettings:
    return StackSettings.for_project(
        tmp_path / "project",
        kafka_port=free_port(),
        registry_port=free_port(),
        catalog_port=free_port(),
    )


def _high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer(broker.consumer_config(bootstrap, group_id="wm"))
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def test_up_status_down_keeps_data(settings: StackSettings) -> None:
    bystander = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        first = up(settings)
        try:
            assert first.component(KAFKA).state == "running" and first.component(KAFKA).started_now
            assert first.component(REGISTRY).state == "running"
            assert first.component(CATALOG).state in ("running", "not available")
            assert first.running
            assert (settings.data_dir / "state.json").exists()
            assert settings.catalog_warehouse.is_dir()

            again = up(settings)  # idempotent: nothing new started
            assert [c.pid for c in again.components] == [c.pid for c in first.components]
            assert not any(c.started_now for c in again.components)
            assert status(settings).running

            client = SchemaRegistryClient({"url": settings.registry_url})
            schema_id = client.register_schema("ping-value", Schema(SCHEMA))
            broker.create_topics(settings.bootstrap, {"ping": 1})
            producer = Producer(broker.producer_config(settings.bootstrap))
            for n in range(10):
                producer.produce("ping", key=str(n).encode(), value=b"x")
            assert producer.flush(30) == 0
        finally:
            stopped = down(settings)
        assert {c.name for c in stopped} == {
            c.name for c in first.components if c.state == "running"
        }
        assert not any(pid_is_alive(c.pid) for c in first.components if c.pid)
        assert not status(settings).running
        assert all(c.state != "running" for c in status(settings).components)
        assert pid_is_alive(bystander.pid)

        second = up(settings)
        try:
            assert second.component(KAFKA).pid != first.component(KAFKA).pid
            client = SchemaRegistryClient({"url": settings.registry_url})
            assert client.get_latest_version("ping-value").schema_id == schema_id
            assert _high_watermark(settings.bootstrap, "ping") == 10
        finally:
            down(settings)
    finally:
        stop_pid(bystander.pid)


def test_down_never_kills_a_reused_pid(settings: StackSettings) -> None:
    """If a recorded PID now belongs to another program, `down` leaves that program alone."""
    other = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        settings.data_dir.mkdir(parents=True)
        record = {
            "pid": other.pid,
            "host": settings.host,
            "port": settings.registry_port,
            "marker": "tableflow_core.registry.server",
            "log_file": str(settings.logs_dir / "schema-registry.log"),
            "started_at": 0,
        }
        (settings.data_dir / "state.json").write_text(
            json.dumps({"components": {REGISTRY: record}})
        )
        assert status(settings).component(REGISTRY).state == "stopped"
        assert down(settings) == []
        assert pid_is_alive(other.pid)
    finally:
        stop_pid(other.pid)


def test_up_refuses_a_port_taken_by_someone_else(settings: StackSettings) -> None:
    with socket.socket() as sock:
        sock.bind((settings.host, settings.kafka_port))
        sock.listen()
        with pytest.raises(StackError, match=f"port {settings.kafka_port}"):
            up(settings)
        assert "in use" in status(settings).component(KAFKA).detail
    assert down(settings) == []
