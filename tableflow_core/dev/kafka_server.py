"""Apache Kafka 4.x in KRaft mode (one combined broker+controller) from Maven Central jars.

    settings = KafkaServerSettings(data_dir=Path(".tableflow/dev/kafka"))
    server = start_kafka(settings)        # formats once, starts, waits until it answers
    server.bootstrap                      # "127.0.0.1:<port>"
    server.client_config()                # bootstrap.servers (+ SASL_SSL keys when secured)
    server.stop()

The jars come from the `kafka` artifact lock (`tableflow_core.jvm.artifacts`): fetched
once into the user cache, then no network. Everything binds 127.0.0.1; ports 0 mean
"pick free ones". `sasl_ssl=True` makes the client listener SASL_SSL with SCRAM-SHA-512
over TLS (a CA made for the data folder, `tls/ca.pem`); the controller listener stays
PLAINTEXT on loopback. Passwords are generated, written only to files of mode 0600 in
the data folder, and never printed or put on a command line.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tableflow_core.dev.launcher import (
    JvmServer,
    LaunchError,
    RunningServer,
    ServerSettings,
    launch,
    log4j2_config,
    render_properties,
    write_private,
)
from tableflow_core.dev.processes import free_port
from tableflow_core.dev.tls import make_server_tls

SCRAM_MECHANISM = "SCRAM-SHA-512"
BROKER_USER = "tableflow-broker"
CLIENT_USER = "tableflow"
CREDENTIALS_FILE = "credentials.json"
# Measured on the 2-core machine (docs/environment.md): C1 only (TieredStopAtLevel=1)
# restarts the broker in ~2-3 s instead of ~5 s; the class-data sharing archive (written
# by the first broker at exit, mapped by every later one) brings that to ~1.5 s.
DEFAULT_JAVA_OPTIONS = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xss512k",
    "-XX:MaxDirectMemorySize=128m",
    "-Djava.awt.headless=true",
)

# The broker logs at WARN, and its "started" line at INFO.
LOG4J2 = log4j2_config("kafka.server.KafkaRaftServer")


class KafkaServerError(LaunchError):
    """The broker could not be formatted or started; the message names its log."""


KAFKA = JvmServer("kafka", "kafka", 17, DEFAULT_JAVA_OPTIONS, KafkaServerError)


@dataclass(frozen=True)
class ScramCredentials:
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True, kw_only=True)
class KafkaServerSettings(ServerSettings):
    controller_port: int = 0
    sasl_ssl: bool = False
    properties: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True)
class KafkaServer(RunningServer):
    controller_port: int
    data_dir: Path
    ca_location: Path | None = None
    credentials: ScramCredentials | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def client_config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka settings that reach this broker (security included)."""
        return client_config(self.host, self.port, self.credentials, self.ca_location, **overrides)


def start_kafka(
    settings: KafkaServerSettings, log_file: Path | None = None, timeout: float = 60.0
) -> KafkaServer:
    """Format `settings.data_dir` if new, start the broker, wait until it answers."""
    data_dir = settings.data_dir.resolve()
    port = settings.port or free_port(settings.host)
    controller_port = settings.controller_port or free_port(settings.host)
    jars = KAFKA.artifacts(settings.lock)

    credentials = None
    broker_credentials = None
    ca_location = None
    properties = server_properties(settings.host, port, controller_port, data_dir / "logs")
    formatted = (data_dir / "logs" / "meta.properties").exists()
    if settings.sasl_ssl:
        if formatted and not (data_dir / CREDENTIALS_FILE).exists():
            raise KafkaServerError(
                f"{data_dir} was formatted without SCRAM users; SASL_SSL needs a new data folder"
            )
        tls = make_server_tls(data_dir / "tls", hosts=(settings.host, "localhost"))
        ca_location = tls.ca_certificate
        broker_credentials, credentials = scram_credentials(data_dir)
        properties.update(sasl_ssl_properties(properties, tls.server_pem, broker_credentials))
    properties.update(dict(settings.properties))

    config_file = data_dir / "server.properties"
    log4j = data_dir / "log4j2.properties"
    data_dir.mkdir(parents=True, exist_ok=True)
    log4j.write_text(LOG4J2)
    # 0600: with SASL_SSL its JAAS line holds the broker's password. Kept after a stop.
    write_private(config_file, render_properties(properties))
    classpath = ("-cp", jars.classpath())
    log = log_file or data_dir / "kafka.log"

    def format_storage(java: list[str]) -> None:
        if not formatted:
            _format(
                [*java, *classpath], config_file, data_dir, broker_credentials, credentials, log
            )

    def answering(running: RunningServer) -> str | None:
        return metadata_answer(client_config(running.host, running.port, credentials, ca_location))

    running = launch(
        KAFKA,
        settings.run(
            port,
            (*classpath, "kafka.Kafka", str(config_file)),
            archive_files=tuple(jars.files),
            system_properties={"log4j2.configurationFile": str(log4j)},
            prepare=format_storage,
            ready=answering,
            log_file=log,
            timeout=timeout,
        ),
    )
    return KafkaServer(
        **running.common(),
        controller_port=controller_port,
        data_dir=data_dir,
        ca_location=ca_location,
        credentials=credentials,
    )


def client_config(
    host: str,
    port: int,
    credentials: ScramCredentials | None = None,
    ca_location: Path | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """librdkafka settings that reach a broker (SASL_SSL keys when it is secured)."""
    config: dict[str, Any] = {"bootstrap.servers": f"{host}:{port}"}
    if credentials is not None:
        config.update(
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": credentials.username,
                "sasl.password": credentials.password,
                "ssl.ca.location": str(ca_location),
            }
        )
    config.update(overrides)
    return config


def server_properties(host: str, port: int, controller_port: int, log_dirs: Path) -> dict[str, str]:
    """A combined broker+controller for one machine: replication 1, loopback listeners."""
    return {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dirs),
        "num.partitions": "1",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # The log cleaner and retention checks run every 5 minutes by default; tests and
        # the dev stack want compaction and retention visible within seconds.
        "log.retention.check.interval.ms": "1000",
        # The first retention check otherwise waits 30 s after start (LogManager).
        "log.initial.task.delay.ms": "1000",
        "log.cleaner.backoff.ms": "1000",
        "auto.create.topics.enable": "false",
    }


def sasl_ssl_properties(
    plain: dict[str, str], keystore_pem: Path, broker: ScramCredentials
) -> dict[str, str]:
    """Turn the client listener into SASL_SSL (SCRAM-SHA-512 over TLS)."""
    listeners = plain["listeners"].replace("PLAINTEXT://", "SASL_SSL://", 1)
    advertised = plain["advertised.listeners"].replace("PLAINTEXT://", "SASL_SSL://", 1)
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{broker.username}" password="{broker.password}";'
    )
    return {
        "listeners": listeners,
        "advertised.listeners": advertised,
        "inter.broker.listener.name": "SASL_SSL",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore_pem),
        "ssl.endpoint.identification.algorithm": "https",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(keystore_pem.with_name("ca.pem")),
    }


def metadata_answer(client_config: dict[str, Any]) -> str | None:
    """None once the broker answers a metadata request with itself as a live broker."""
    admin = AdminClient({**client_config, "log_level": 3})
    try:
        return None if admin.list_topics(timeout=2).brokers else "no live broker yet"
    except KafkaException as exc:
        return str(exc)


def _format(
    base: list[str],
    config_file: Path,
    data_dir: Path,
    broker: ScramCredentials | None,
    client: ScramCredentials | None,
    log: Path,
) -> None:
    """`StorageTool format --standalone`; SCRAM users go in through a 0600 argument file."""

    arguments = [
        "kafka.tools.StorageTool",
        "format",
        "--standalone",
        "--cluster-id",
        _cluster_id(),
        "--config",
        str(config_file),
    ]
    for user in (broker, client):
        if user is not None:
            arguments += [
                "--add-scram",
                f"{SCRAM_MECHANISM}=[name={user.username},password={user.password}]",
            ]
    # `java @file` reads the main class and its arguments from the file: passwords stay
    # off the process table.
    argument_file = data_dir / "format.args"
    write_private(argument_file, "\n".join(_quote_argument(a) for a in arguments) + "\n")
    try:
        result = subprocess.run(
            [*base, f"@{argument_file}"], capture_output=True, text=True, check=False
        )
    finally:
        argument_file.unlink(missing_ok=True)
    with open(log, "a") as out:
        out.write(redact_format_output(result.stdout + result.stderr))
    if result.returncode != 0:
        raise KafkaServerError(
            f"formatting {data_dir / 'logs'} failed (exit {result.returncode}); see {log}"
        )


def redact_format_output(text: str) -> str:
    """The storage tool prints its bootstrap records, SCRAM salts and keys included."""
    return "".join(
        "(bootstrap metadata with SCRAM credentials: not logged)\n"
        if "ScramCredentialRecord" in line
        else line
        for line in text.splitlines(keepends=True)
    )


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (22 chars).

    Like Kafka's `Uuid.randomUuid()`, never one starting with "-": the storage tool's
    argument parser would read it as an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _quote_argument(argument: str) -> str:
    # Java argument files: double quotes group, backslash escapes inside quotes.
    return '"' + argument.replace("\\", "\\\\").replace('"', '\\"') + '"'


def scram_credentials(data_dir: Path) -> tuple[ScramCredentials, ScramCredentials]:
    """The broker's and the client's SCRAM users, generated once per data folder."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / CREDENTIALS_FILE
    if path.is_file():
        stored = json.loads(path.read_text())
    else:
        stored = {
            "broker": {"username": BROKER_USER, "password": secrets.token_urlsafe(24)},
            "client": {"username": CLIENT_USER, "password": secrets.token_urlsafe(24)},
        }
        write_private(path, json.dumps(stored))
    return ScramCredentials(**stored["broker"]), ScramCredentials(**stored["client"])
