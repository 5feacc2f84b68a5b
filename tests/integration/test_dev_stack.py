"""`prepare` / `up` / `status` / `down` / `require_running` of a project's local stack, for
real: Apache Kafka, the registries, the catalog and s3proxy on ports chosen per project."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from pydantic import SecretStr

from tableflow_core.config.dev_stack import StackRecord
from tableflow_core.dev import broker
from tableflow_core.dev.processes import pid_is_alive, port_is_open, stop_pid
from tableflow_core.dev.s3_server import S3Credentials, s3_client
from tableflow_core.dev.stack import (
    CATALOG,
    KAFKA,
    REGISTRY,
    S3,
    StackError,
    StackNotRunningError,
    StackSettings,
    down,
    prepare,
    require_running,
    status,
    up,
)

SCHEMA = json.dumps({"type": "record", "name": "Ping", "fields": [{"name": "n", "type": "int"}]})


def _high_watermark(config: dict[str, str], topic: str) -> int:
    consumer = Consumer({**config, "group.id": "wm"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def test_up_status_down_keeps_data_ports_and_credentials(tmp_path: Path) -> None:
    settings = StackSettings.for_project(tmp_path / "project")
    bystander = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        first = up(settings)
        try:
            assert [c.name for c in first.components] == [KAFKA, REGISTRY, CATALOG, S3]
            assert all(c.state == "running" and c.started_now for c in first.components)
            record = StackRecord.read(settings.data_dir)
            assert record is not None
            bootstrap = record.values["kafka_bootstrap"]
            assert bootstrap == first.component(KAFKA).address
            assert record.values["schema_registry_url"] == first.component(REGISTRY).address
            assert record.values["catalog_url"] == first.component(CATALOG).address
            # The S3 keys are made once and kept in the 0600 credentials file, not stack.json.
            assert (settings.data_dir / "credentials.json").stat().st_mode & 0o077 == 0
            secret = record.secrets["s3_secret_access_key"]
            assert secret not in (settings.data_dir / "stack.json").read_text()
            s3 = s3_client(
                record.values["s3_endpoint"],
                S3Credentials(record.secrets["s3_access_key_id"], SecretStr(secret)),
                record.values["s3_region"],
            )
            s3.put_object(Bucket=record.values["s3_bucket"], Key="k", Body=b"kept")

            again = up(settings)  # idempotent: nothing new started
            assert [c.pid for c in again.components] == [c.pid for c in first.components]
            assert not any(c.started_now for c in again.components)
            assert status(settings).running
            require_running(settings.data_dir, {KAFKA, REGISTRY, CATALOG, S3}, "dev")

            client = SchemaRegistryClient({"url": record.values["schema_registry_url"]})
            schema_id = client.register_schema("ping-value", Schema(SCHEMA))
            broker.create_topics(bootstrap, {"ping": 1})
            producer = Producer(broker.producer_config(bootstrap))
            for n in range(10):
                producer.produce("ping", key=str(n).encode(), value=b"x")
            assert producer.flush(30) == 0
        finally:
            stopped = down(settings)
        assert {c.name for c in stopped} == {KAFKA, REGISTRY, CATALOG, S3}
        assert not any(pid_is_alive(c.pid) for c in first.components if c.pid)
        assert not status(settings).running
        assert pid_is_alive(bystander.pid)
        with pytest.raises(StackNotRunningError, match="not running"):
            require_running(settings.data_dir, {KAFKA}, "dev")

        second = up(settings)
        try:
            assert second.component(KAFKA).pid != first.component(KAFKA).pid
            # Same ports (the config's addresses stay valid), same keys, same data.
            assert StackRecord.read(settings.data_dir) == record
            assert client.get_latest_version("ping-value").schema_id == schema_id
            assert _high_watermark({"bootstrap.servers": bootstrap}, "ping") == 10
            body = s3.get_object(Bucket=record.values["s3_bucket"], Key="k")["Body"].read()
            assert body == b"kept"
        finally:
            down(settings)
    finally:
        stop_pid(bystander.pid)


def test_two_projects_get_two_stacks_and_a_kept_port_taken_meanwhile_moves(
    tmp_path: Path,
) -> None:
    one = StackSettings.for_project(tmp_path / "one", components=(KAFKA,))
    two = StackSettings.for_project(tmp_path / "two", components=(KAFKA,))
    first = prepare(one)
    with socket.socket() as squatter:
        # Something else takes project one's Kafka port while its stack is down.
        squatter.bind(("127.0.0.1", first.ports[KAFKA]["port"]))
        squatter.listen()
        up(two)
        try:
            started = up(one)
            try:
                moved = StackRecord.read(one.data_dir)
                assert moved is not None
                assert moved.ports[KAFKA]["port"] != first.ports[KAFKA]["port"]
                assert started.component(KAFKA).port == moved.ports[KAFKA]["port"]
                other = StackRecord.read(two.data_dir)
                assert other is not None
                assert other.values["kafka_bootstrap"] != moved.values["kafka_bootstrap"]
                assert port_is_open("127.0.0.1", other.ports[KAFKA]["port"])
            finally:
                down(one)
        finally:
            down(two)


def test_down_never_kills_a_reused_pid(tmp_path: Path) -> None:
    """If a recorded PID now belongs to another program, `down` leaves that program alone."""
    settings = StackSettings.for_project(tmp_path / "project")
    other = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        settings.data_dir.mkdir(parents=True)
        record = {
            "pid": other.pid,
            "host": settings.host,
            "ports": {"port": 1},
            "arguments": ["tableflow_core.registry.server", "1"],
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


def test_a_pinned_port_taken_by_someone_else_is_refused(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        settings = StackSettings.for_project(
            tmp_path / "project", components=(KAFKA,), kafka_port=port
        )
        with pytest.raises(StackError, match=f"port {port}"):
            up(settings)
        assert "in use" in status(settings).component(KAFKA).detail
    assert down(settings) == []


@pytest.mark.slow
def test_apicurio_and_kafka_over_sasl_ssl(tmp_path: Path) -> None:
    """The stack's options: Apicurio as the registry, Kafka's only listener SASL_SSL; the
    record hands the project the user, its password (credentials file) and the CA."""
    settings = StackSettings.for_project(
        tmp_path / "project",
        components=(KAFKA, REGISTRY),
        registry="apicurio",
        kafka_security="sasl_ssl",
    )
    up(settings)
    try:
        record = StackRecord.read(settings.data_dir)
        assert record is not None
        assert record.values["schema_registry_url"].endswith("/apis/ccompat/v7")
        client = SchemaRegistryClient({"url": record.values["schema_registry_url"]})
        assert client.register_schema("ping-value", Schema(SCHEMA)) > 0
        secured = {
            "bootstrap.servers": record.values["kafka_bootstrap"],
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": record.values["kafka_sasl_username"],
            "sasl.password": record.secrets["kafka_sasl_password"],
            "ssl.ca.location": record.values["kafka_ca_location"],
        }
        assert record.secrets["kafka_sasl_password"] not in json.dumps(record.values)
        broker.create_topics(record.values["kafka_bootstrap"], {"ping": 1}, client_config=secured)
        producer = Producer({**secured, "linger.ms": 0})
        producer.produce("ping", value=b"x")
        assert producer.flush(30) == 0
        assert _high_watermark(secured, "ping") == 1
    finally:
        down(settings)
