"""The one server launcher, once per server declared on it (Kafka, s3proxy, Apicurio,
Nessie, Trino, Kafka Connect): a real start; a request only the ready server answers; the
JVM in its own session, bound to loopback, writing its log; its class-data archive; the
secret-bearing files gone when they should be; and a stop by the recorded pid that
leaves neither a process nor a listener. Then a start that fails: the error names the
log, and neither the secret file nor the claimed archive stays."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
from confluent_kafka.admin import AdminClient
from pydantic import SecretStr

from tableflow_core.dev.apicurio_server import ApicurioSettings, start_apicurio
from tableflow_core.dev.kafka_server import KafkaServer, KafkaServerSettings, start_kafka
from tableflow_core.dev.launcher import JvmServer, Launch, LaunchError, launch
from tableflow_core.dev.processes import BackgroundProcess, pid_is_alive, port_is_open
from tableflow_core.dev.s3_server import RunningS3Server, S3ServerSettings, start_s3_server
from tableflow_core.jvm.class_data_sharing import cache_directory
from tests.support.kafka_connect import KafkaConnectSettings, start_kafka_connect
from tests.support.kafka_connect import secrets_file as connect_secrets
from tests.support.nessie_server import NessieS3, NessieSettings, start_nessie
from tests.support.nessie_server import secrets_file as nessie_secrets
from tests.support.trino_server import TrinoSettings, start_trino


@dataclass
class Started:
    """What a test checks of a server the launcher started."""

    name: str
    process: BackgroundProcess
    stop: Callable[[], None]
    answer: Callable[[], Any]  # a request only the ready server answers
    secrets_while_running: list[Path] = field(default_factory=list)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def assert_launched_and_stopped(started: Started) -> None:
    process = started.process
    try:
        assert os.getsid(process.pid) == process.pid, "the server runs in its own session"
        assert process.host == "127.0.0.1"
        assert started.answer() is not None
        assert process.log_file.is_file()  # quiet servers (Connect at WARN) may leave it empty
        for secret in started.secrets_while_running:
            assert secret.stat().st_mode & 0o777 == 0o600
    finally:
        started.stop()  # a failed check must not leave the JVM running
    assert not pid_is_alive(process.pid)
    assert not port_is_open(process.host, process.port)
    for secret in started.secrets_while_running:
        assert not secret.exists()
    archives = [
        p for p in (cache_directory() / started.name).glob("*.jsa*") if "probe" not in p.name
    ]
    assert archives, f"no class-data archive for {started.name}"


class Stoppable(Protocol):
    def stop(self) -> None: ...


S = TypeVar("S", bound=Stoppable)


def stopped_after_the_test(server: S) -> Iterator[S]:
    """A fixture's body: `server` for the test, stopped whatever the test did."""
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaServer]:
    yield from stopped_after_the_test(start_kafka(KafkaServerSettings(data_dir=tmp_path / "kafka")))


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[RunningS3Server]:
    yield from stopped_after_the_test(start_s3_server(S3ServerSettings(data_dir=tmp_path / "s3")))


def test_kafka(kafka: KafkaServer) -> None:
    admin = AdminClient(kafka.client_config())
    assert_launched_and_stopped(
        Started("kafka", kafka.process, kafka.stop, lambda: admin.list_topics(timeout=10).brokers)
    )


def test_s3proxy(s3: RunningS3Server) -> None:
    assert not s3.settings.properties_file.exists(), "its secret is gone once it listens"
    client = s3.client()
    assert_launched_and_stopped(
        Started("s3", s3.process, s3.stop, lambda: client.head_bucket(Bucket=s3.bucket))
    )


def test_apicurio(tmp_path: Path) -> None:
    server = start_apicurio(ApicurioSettings(data_dir=tmp_path / "apicurio"))
    assert_launched_and_stopped(
        Started("apicurio", server.process, server.stop, lambda: get_json(server.url + "/subjects"))
    )


def test_nessie(tmp_path: Path, s3: RunningS3Server) -> None:
    settings = NessieSettings(
        data_dir=tmp_path / "nessie",
        warehouse=f"s3://{s3.bucket}/nessie",
        s3=NessieS3(
            endpoint=s3.endpoint,
            access_key_id=s3.credentials.access_key_id,
            secret_access_key=SecretStr(s3.credentials.secret_access_key.get_secret_value()),
        ),
    )
    server = start_nessie(settings)
    config_url = server.iceberg_uri + "/v1/config"
    assert_launched_and_stopped(
        Started(
            "nessie",
            server.process,
            server.stop,
            lambda: get_json(config_url)["defaults"],
            [nessie_secrets(server.data_dir)],
        )
    )


def test_trino(tmp_path: Path) -> None:
    server = start_trino(TrinoSettings(data_dir=tmp_path / "trino"))
    assert_launched_and_stopped(
        Started("trino", server.process, server.stop, lambda: server.query("SELECT 41 + 1"))
    )


def test_kafka_connect(tmp_path: Path, kafka: KafkaServer) -> None:
    worker = start_kafka_connect(
        KafkaConnectSettings(data_dir=tmp_path / "connect", bootstrap=kafka.bootstrap)
    )
    assert_launched_and_stopped(
        Started(
            "kafka-connect",
            worker.process,
            worker.stop,
            lambda: get_json(worker.rest_url + "/connector-plugins"),
            [connect_secrets(worker.data_dir)],
        )
    )


def test_a_failed_start_names_its_log_and_leaves_no_secret_and_no_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    secret = tmp_path / "run" / "secret.properties"
    never_listens = JvmServer(name="exits-at-once", lock="s3proxy", min_java=17)
    with pytest.raises(
        LaunchError, match=r"(?s)exits-at-once did not start.*exits-at-once\.log"
    ) as raised:
        launch(
            never_listens,
            Launch(
                data_dir=tmp_path / "run",
                port=1,  # never bound: `java -version` exits before it listens anywhere
                main=("-version",),
                archive_files=tuple(never_listens.artifacts().files),
                private_files={secret: "key=value\n"},
                timeout=30,
            ),
        )
    assert "exited with code 0" in str(raised.value)
    assert not secret.exists()
    assert list((tmp_path / "cache" / "tableflow" / "jvm" / "exits-at-once").glob("*.jsa*")) == []
