"""A stack that is down: plan fails at once, names the component and its address,
suggests `tableflow dev up` on a dev target, never talks to a server this project's stack
did not start, and librdkafka does not flood stderr."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pytest

from tableflow_core.config.dev_stack import StackRecord
from tableflow_core.dev.processes import free_port
from tableflow_core.kafka.admin import (
    KafkaUnreachableError,
    consumer_conf,
    probe_bootstrap,
)
from tableflow_core.schemas.payloads import AvroPayloadDecoder, RegistryUnavailable
from tableflow_core.schemas.registry import REQUEST_TIMEOUT_S, RegistrySettings
from tests.integration.test_cli_basics import explicit_addresses, tableflow


def closed_port() -> int:
    """A loopback port nothing listens on (free now, outside the ephemeral range)."""
    return free_port()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    assert tableflow("init", "p", cwd=tmp_path).returncode == 0
    return tmp_path / "p"


def test_plan_before_the_first_dev_up(project: Path) -> None:
    result = tableflow("plan", cwd=project)
    assert result.returncode == 1
    assert "this project's dev stack" in result.stderr
    assert "has never been started: start it with `tableflow dev up`" in result.stderr
    assert result.stderr.count("tableflow dev up") == 1
    assert "rdkafka" not in result.stderr and "%3|" not in result.stderr
    assert result.stdout == ""


def _stopped_stack(project: Path, kafka: int) -> None:
    """The record a stopped stack leaves (its ports), and no process of it running."""
    StackRecord(
        values={
            "kafka_bootstrap": f"127.0.0.1:{kafka}",
            "schema_registry_url": f"http://127.0.0.1:{closed_port()}",
            "catalog_port": str(closed_port()),
        },
        ports={"kafka": {"port": kafka, "controller": closed_port()}},
    ).write(project / ".tableflow" / "dev")


def test_plan_with_the_dev_stack_down(project: Path) -> None:
    kafka = closed_port()
    _stopped_stack(project, kafka)
    result = tableflow("plan", cwd=project)
    assert result.returncode == 1
    assert f"uses kafka at port {kafka} of this project's dev stack" in result.stderr
    assert "not running: start it with `tableflow dev up`" in result.stderr
    assert result.stdout == ""


def test_a_server_on_the_stacks_port_that_the_stack_did_not_start_is_never_used(
    project: Path,
) -> None:
    """Another program (another project's stack, say) on this project's Kafka port: the
    plan stops instead of planning against it."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        _stopped_stack(project, port)
        result = tableflow("plan", cwd=project)
    assert result.returncode == 1
    assert f"port {port} is in use by a process this project's stack did not start" in (
        result.stderr
    )
    assert "which tableflow will not talk to" in result.stderr


def test_explicit_addresses_that_are_down_name_kafka_and_suggest_dev_up(tmp_path: Path) -> None:
    kafka = closed_port()
    (tmp_path / "tableflow_project.yml").write_text(
        f"name: p\ntargets:\n  dev:\n    kafka: {{bootstrap_servers: '127.0.0.1:{kafka}'}}\n"
        "    dev_stack: {}\ntables:\n  - {name: t, topic: t, value: {format: json}}\n"
    )
    result = tableflow("plan", cwd=tmp_path)
    assert result.returncode == 1
    assert f"kafka at 127.0.0.1:{kafka} is not reachable" in result.stderr
    assert "Connection refused" in result.stderr
    assert "tableflow dev up" in result.stderr
    assert "rdkafka" not in result.stderr and "%3|" not in result.stderr


def test_plan_on_a_remote_target_names_kafka_without_the_dev_hint(project: Path) -> None:
    address = f"127.0.0.1:{closed_port()}"
    result = tableflow("plan", "--target", "prod", cwd=project, env={"KAFKA_BOOTSTRAP": address})
    assert result.returncode == 1
    assert f"kafka at {address} is not reachable" in result.stderr
    assert "dev up" not in result.stderr


def test_probe_accepts_a_listening_server_and_refuses_a_closed_port() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe_bootstrap(f"127.0.0.1:{closed_port()},127.0.0.1:{port}", timeout=2.0)
    with pytest.raises(KafkaUnreachableError, match="Connection refused"):
        probe_bootstrap(f"127.0.0.1:{closed_port()}", timeout=2.0)


def test_librdkafka_logs_go_to_python_logging_at_debug(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    from confluent_kafka import Consumer

    caplog.set_level(logging.DEBUG, logger="tableflow.kafka.librdkafka")
    consumer = Consumer(consumer_conf({"bootstrap.servers": f"127.0.0.1:{closed_port()}"}))
    try:
        for _ in range(10):
            consumer.poll(0.2)
            if caplog.records:
                break
    finally:
        consumer.close()
    records = [r for r in caplog.records if r.name == "tableflow.kafka.librdkafka"]
    assert records, "librdkafka's connection failures should reach Python logging"
    assert all(r.levelno == logging.DEBUG for r in records)
    assert "Connection refused" in " ".join(r.getMessage() for r in records)
    assert "%3|" not in capfd.readouterr().err


def test_dev_produce_with_the_stack_down(project: Path) -> None:
    kafka = closed_port()
    _stopped_stack(project, kafka)
    result = tableflow("dev", "produce", "orders", "--count", "10", cwd=project)
    assert result.returncode == 1
    assert f"uses kafka at port {kafka}" in result.stderr
    assert "tableflow dev up" in result.stderr
    assert "%3|" not in result.stderr


def test_status_names_what_is_down_and_never_shows_ok(project: Path) -> None:
    """Issue 32: with the broker down, `status` showed an existing table as `ok` and
    exited 0. Now the table is `unreachable`, the error names each component, exit 1."""
    import json

    import pyarrow as pa

    from tableflow_core.config.loader import load_project
    from tableflow_core.targets.catalog import open_catalog

    kafka, registry = closed_port(), closed_port()
    # Addresses of its own (not dev_stack()): the embedded catalog starts on its port.
    explicit_addresses(project, kafka, registry, closed_port())
    env: dict[str, str] = {}
    loaded = load_project(project)
    with open_catalog(loaded) as handle:  # the table exists: only Kafka is unknown
        handle.catalog.create_namespace("raw")
        handle.catalog.create_table(("raw", "orders"), pa.schema([("id", pa.string())]))

    result = tableflow("status", cwd=project, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if "orders" in line)
    assert " ok " not in row and "unreachable" in row
    assert f"kafka at 127.0.0.1:{kafka} is not reachable" in result.stderr
    assert "Connection refused" in result.stderr
    assert f"schema registry at http://127.0.0.1:{registry} is not reachable" in result.stderr
    assert "tableflow dev up" in result.stderr
    assert "Nothing was changed" not in result.stderr  # status never changes anything

    as_json = tableflow("status", "--json", cwd=project, env=env)
    assert as_json.returncode == 1
    (table,) = json.loads(as_json.stdout)["tables"]
    assert table["exists"] is True and table["state"] == "unreachable"
    assert table["unreachable"] == [
        f"kafka at 127.0.0.1:{kafka}",
        f"schema registry at http://127.0.0.1:{registry}",
    ]


def test_a_registry_that_accepts_and_never_answers_is_an_outage_not_a_hang() -> None:
    """confluent-kafka's client has no request timeout of its own: a registry that stalls
    (accepts the connection, never answers) hung a Spark task for ever. Now its requests
    time out and decoding raises RegistryUnavailable, which fails the run (nothing skipped)."""
    with socket.socket() as stalled:
        stalled.bind(("127.0.0.1", 0))
        stalled.listen()
        settings = RegistrySettings(
            url=f"http://127.0.0.1:{stalled.getsockname()[1]}", request_timeout_s=1.0
        )
        decoder = AvroPayloadDecoder(settings.client(), as_columns=True)
        started = time.monotonic()
        with pytest.raises(RegistryUnavailable, match="schema id 7"):
            decoder.decode(b"\x00" + (7).to_bytes(4, "big") + b"\x02")
    assert time.monotonic() - started < 10
    assert RegistrySettings(url="http://127.0.0.1:1").request_timeout_s == REQUEST_TIMEOUT_S
