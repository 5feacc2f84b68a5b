"""Kafka Connect standalone with the Apache Iceberg sink or Debezium, from Maven Central jars.

    worker = start_kafka_connect(KafkaConnectSettings(
        data_dir=Path(".tableflow/dev/connect"), bootstrap="127.0.0.1:9092",
        connectors=(iceberg_sink(name="orders-sink", topics="orders", table="db.orders",
                                 catalog=IcebergSinkCatalog(uri=..., credential=...)),)))
    worker.rest_url                       # http://127.0.0.1:<port> (Connect's REST API)
    worker.connector_status("orders-sink")
    worker.stop()

Artifact locks: `kafka-connect` (the worker: connect-runtime 4.3.1, the JSON converter,
a log4j2 binding), and one per plugin: `iceberg-kafka-connect` (the sink 1.12.0 with its
events and transforms, Parquet, S3FileIO and the AWS SDK bundle) and `debezium-postgres`
(the Debezium PostgreSQL source connector 3.6.1.Final, `debezium_postgres_source`). Plugin
folders are built per run from links to the cached jars (`KafkaConnectSettings.plugins`
names the locks): the sink keeps kafka-clients (its control-topic clients load in the
plugin's class loader), Debezium takes the worker's.

Records reach the sink through `JsonConverter` with `schemas.enable=false`: the sink gets
Maps and creates and evolves the table itself (`iceberg.tables.auto-create-enabled`,
`iceberg.tables.evolve-schema-enabled`). Avro through a registry would need Confluent's
AvroConverter, which is not on Maven Central.

Secrets (the catalog's client credential, S3 keys) never reach a command line or a
properties file the worker logs: the connector file refers to them as
`${file:<secrets>:<key>}` (Kafka's FileConfigProvider), the secrets file is 0600 and
removed when the worker stops.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from tableflow_core.dev.launcher import (
    JvmServer,
    LaunchError,
    RunningServer,
    ServerSettings,
    http_ok,
    launch,
    log4j2_config,
    render_properties,
)
from tableflow_core.dev.processes import free_port

SINK_LOCK = "iceberg-kafka-connect"
DEBEZIUM_POSTGRES_LOCK = "debezium-postgres"
APICURIO_CONVERTER_LOCK = "apicurio-converter"
APICURIO_AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
# Jars of a plugin's lock that the worker provides (the plugin takes the worker's copy).
PLUGIN_LEAVES_OUT: dict[str, tuple[str, ...]] = {
    SINK_LOCK: ("slf4j",),
    DEBEZIUM_POSTGRES_LOCK: (
        "slf4j",
        "kafka-clients",
        "connect-api",
        "lz4-java",
        "zstd-jni",
        "snappy-java",
    ),
    APICURIO_CONVERTER_LOCK: (
        "slf4j",
        "kafka-clients",
        "connect-api",
        "connect-json",
        "lz4-java",
        "zstd-jni",
        "snappy-java",
    ),
}
DEBEZIUM_POSTGRES_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"
SINK_CLASS = "org.apache.iceberg.connect.IcebergSinkConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
DEFAULT_JAVA_OPTIONS = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
    # AWS SDK 2.30+ checksum trailers (apache/iceberg#14439): only where S3 requires them.
    "-Daws.requestChecksumCalculation=when_required",
    "-Daws.responseChecksumValidation=when_required",
)
# Connect logs at WARN; the sink's commits at INFO (the benchmark reads them).
LOG4J2 = log4j2_config("org.apache.iceberg.connect.channel")


class KafkaConnectError(LaunchError):
    """The worker did not start or a connector failed; the message names the log."""


KAFKA_CONNECT = JvmServer(
    "kafka-connect", "kafka-connect", 17, DEFAULT_JAVA_OPTIONS, KafkaConnectError
)


@dataclass(frozen=True)
class IcebergSinkCatalog:
    """The Iceberg REST catalog the sink commits to, and how it reaches S3."""

    uri: str
    credential: SecretStr | None = None
    oauth2_server_uri: str | None = None
    vended_credentials: bool = True
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    properties: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ConnectorFile:
    """A connector file's properties (sink or source); `secrets` go to the 0600 secrets file."""

    name: str
    properties: tuple[tuple[str, str], ...]
    secrets: tuple[tuple[str, SecretStr], ...] = ()


def iceberg_sink(
    name: str,
    topics: str,
    table: str,
    catalog: IcebergSinkCatalog,
    commit_interval_ms: int = 300_000,
    control_topic: str | None = None,
    tasks: int = 1,
    extra: Mapping[str, str] | None = None,
) -> ConnectorFile:
    """The Iceberg sink writing `topics` to one table (created and evolved by the sink)."""
    props: dict[str, str] = {
        "connector.class": SINK_CLASS,
        "tasks.max": str(tasks),
        "topics": topics,
        "iceberg.tables": table,
        "iceberg.tables.auto-create-enabled": "true",
        "iceberg.tables.evolve-schema-enabled": "true",
        "iceberg.control.commit.interval-ms": str(commit_interval_ms),
        "iceberg.catalog.type": "rest",
        "iceberg.catalog.uri": catalog.uri,
        "iceberg.catalog.cache-enabled": "false",
    }
    if control_topic:
        props["iceberg.control.topic"] = control_topic
    secrets: list[tuple[str, SecretStr]] = []
    if catalog.credential is not None:
        props["iceberg.catalog.rest.auth.type"] = "oauth2"
        props["iceberg.catalog.oauth2-server-uri"] = (
            catalog.oauth2_server_uri or catalog.uri.rstrip("/") + "/v1/oauth/tokens"
        )
        props["iceberg.catalog.scope"] = "catalog"
        secrets.append(("iceberg.catalog.credential", catalog.credential))
    if catalog.vended_credentials:
        props["iceberg.catalog.header.X-Iceberg-Access-Delegation"] = "vended-credentials"
    if catalog.s3_access_key_id and catalog.s3_secret_access_key is not None:
        props["iceberg.catalog.s3.access-key-id"] = catalog.s3_access_key_id
        secrets.append(("iceberg.catalog.s3.secret-access-key", catalog.s3_secret_access_key))
    props.update(dict(catalog.properties))
    props.update(dict(extra or {}))
    return ConnectorFile(name, tuple(props.items()), tuple(secrets))


@dataclass(frozen=True)
class PostgresSource:
    """The database Debezium reads, and the publication and slot it reads through."""

    host: str
    port: int
    database: str
    user: str
    password: SecretStr
    tables: tuple[str, ...]  # schema-qualified: "public.orders"
    publication: str = "tableflow_cdc"
    slot: str = "tableflow_cdc"


def debezium_postgres_source(
    name: str,
    source: PostgresSource,
    topic_prefix: str,
    partitions: int = 3,
    snapshot_mode: str = "initial",
    schemas_enable: bool = True,
    extra: Mapping[str, str] | None = None,
) -> ConnectorFile:
    """Debezium's PostgreSQL connector on `pgoutput`, one topic per table
    (`<topic_prefix>.<schema>.<table>`, created with `partitions`), keys and values through
    `JsonConverter` with embedded schemas (`schemas_enable`). The publication is the
    caller's (`publication.autocreate.mode=disabled`); the slot is made by Debezium."""
    props: dict[str, str] = {
        "connector.class": DEBEZIUM_POSTGRES_CLASS,
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": source.host,
        "database.port": str(source.port),
        "database.user": source.user,
        "database.dbname": source.database,
        "topic.prefix": topic_prefix,
        "table.include.list": ",".join(source.tables),
        "publication.name": source.publication,
        "publication.autocreate.mode": "disabled",
        "slot.name": source.slot,
        "snapshot.mode": snapshot_mode,
        "topic.creation.default.partitions": str(partitions),
        "topic.creation.default.replication.factor": "1",
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": str(schemas_enable).lower(),
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": str(schemas_enable).lower(),
    }
    props.update(dict(extra or {}))
    if props["value.converter"] != JSON_CONVERTER:
        for side in ("key", "value"):
            props.pop(f"{side}.converter.schemas.enable", None)
    return ConnectorFile(name, tuple(props.items()), (("database.password", source.password),))


def apicurio_avro_converters(registry_api_url: str) -> dict[str, str]:
    """Connector properties: keys and values as Avro through Apicurio's converter
    (`APICURIO_CONVERTER_LOCK`, linked into the connector's plugin folder), in Confluent's
    wire format (magic byte, 4-byte id = Apicurio's content id, which its ccompat API
    serves as the schema id). `registry_api_url`: Apicurio's `.../apis/registry/v2`."""
    props: dict[str, str] = {}
    for side in ("key", "value"):
        converter = f"{side}.converter"
        props[converter] = APICURIO_AVRO_CONVERTER
        props[f"{converter}.apicurio.registry.url"] = registry_api_url
        props[f"{converter}.apicurio.registry.auto-register"] = "true"
        props[f"{converter}.apicurio.registry.find-latest"] = "true"
        props[f"{converter}.apicurio.registry.as-confluent"] = "true"
        props[f"{converter}.apicurio.registry.use-id"] = "contentId"
        props[f"{converter}.apicurio.registry.headers.enabled"] = "false"
        props.pop(f"{converter}.schemas.enable", None)
    return props


@dataclass(frozen=True, kw_only=True)
class KafkaConnectSettings(ServerSettings):
    bootstrap: str
    connectors: tuple[ConnectorFile, ...] = ()
    heap_mb: int = 384
    worker_properties: tuple[tuple[str, str], ...] = ()
    plugins: tuple[str, ...] = (SINK_LOCK,)
    plugin_extras: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True)
class KafkaConnectWorker(RunningServer):
    data_dir: Path
    connectors: tuple[str, ...] = ()

    @property
    def rest_url(self) -> str:
        return self.base_url

    def connector_status(self, name: str) -> dict[str, Any]:
        return connector_status(self.rest_url, name)

    def stop(self, timeout: float = 30.0) -> None:
        super().stop(timeout)


def secrets_file(data_dir: Path) -> Path:
    return data_dir / "secrets.properties"


def build_plugin_dir(
    plugin_root: Path,
    plugins: tuple[str, ...] = (SINK_LOCK,),
    plugin_extras: tuple[tuple[str, str], ...] = (),
) -> Path:
    """`plugin_root/<lock>/` for each plugin lock, holding links to its cached jars, plus
    those of each `(plugin, extra lock)` in `plugin_extras` (a converter the connector
    loads from its own class loader); where two locks hold an artifact, the newer wins."""
    plugin_root.mkdir(parents=True, exist_ok=True)
    for entry in plugin_root.iterdir():
        if entry.is_dir() and entry.name not in plugins:
            shutil.rmtree(entry)
    for name in plugins:
        extras = tuple(extra for plugin, extra in plugin_extras if plugin == name)
        _link_plugin(plugin_root / name, (name, *extras))
    return plugin_root


def _link_plugin(plugin: Path, lock_names: tuple[str, ...]) -> None:
    newest: dict[tuple[str, str], tuple[tuple[int | str, ...], Path]] = {}
    for lock_name in lock_names:
        resolved = KAFKA_CONNECT.artifacts(lock_name)
        leave_out = PLUGIN_LEAVES_OUT.get(lock_name, ("slf4j",))
        for locked, path in zip(resolved.lock.artifacts, resolved.files, strict=True):
            coordinate = locked.coordinate
            if coordinate.artifact.startswith(leave_out):
                continue
            artifact = (coordinate.group, coordinate.artifact + coordinate.classifier)
            version = _version_key(coordinate.version)
            if artifact not in newest or newest[artifact][0] < version:
                newest[artifact] = (version, path)
    wanted = {path.name: path for _, path in newest.values()}
    plugin.mkdir(parents=True, exist_ok=True)
    for entry in plugin.iterdir():
        if entry.name not in wanted:
            entry.unlink()
    for file_name, path in wanted.items():
        link = plugin / file_name
        if not link.is_symlink() or link.resolve() != path.resolve():
            with contextlib.suppress(FileNotFoundError):
                link.unlink()
            link.symlink_to(path)


def _version_key(version: str) -> tuple[int | str, ...]:
    """`2.21.2` > `2.16.2` > `2.16` (numbers compared as numbers; a qualifier as text)."""
    parts: list[int | str] = []
    for piece in version.replace("-", ".").split("."):
        parts.append(int(piece) if piece.isdigit() else -1)
    return tuple(parts)


def worker_properties(
    settings: KafkaConnectSettings, port: int, plugin_root: Path
) -> dict[str, str]:
    data_dir = settings.data_dir.resolve()
    return {
        "bootstrap.servers": settings.bootstrap,
        "listeners": f"http://{settings.host}:{port}",
        "rest.advertised.host.name": settings.host,
        "rest.advertised.port": str(port),
        "plugin.path": str(plugin_root),
        # Scanning the plugin's jars (no ServiceLoader manifests in the sink's jars).
        "plugin.discovery": "only_scan",
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": "false",
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": "false",
        "offset.storage.file.filename": str(data_dir / "connect.offsets"),
        "offset.flush.interval.ms": "1000",
        "config.providers": "file",
        "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
        **dict(settings.worker_properties),
    }


def start_kafka_connect(
    settings: KafkaConnectSettings, log_file: Path | None = None, timeout: float = 120.0
) -> KafkaConnectWorker:
    """Start a standalone worker with `settings.connectors`; wait until each task runs."""
    data_dir = settings.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    port = settings.port or free_port(settings.host)
    worker_jars = KAFKA_CONNECT.artifacts(settings.lock)
    plugin_root = build_plugin_dir(data_dir / "plugins", settings.plugins, settings.plugin_extras)

    secrets: dict[str, str] = {}
    connector_files = []
    for connector in settings.connectors:
        props = dict(connector.properties)
        props["name"] = connector.name
        for key, value in connector.secrets:
            secret_key = f"{connector.name}.{key}"
            secrets[secret_key] = value.get_secret_value()
            props[key] = f"${{file:{secrets_file(data_dir)}:{secret_key}}}"
        path = data_dir / f"{connector.name}.properties"
        path.write_text(render_properties(props))
        connector_files.append(path)
    worker_file = data_dir / "worker.properties"
    worker_file.write_text(render_properties(worker_properties(settings, port, plugin_root)))
    log4j = data_dir / "log4j2.properties"
    log4j.write_text(LOG4J2)
    names = tuple(c.name for c in settings.connectors)
    running = launch(
        KAFKA_CONNECT,
        settings.run(
            port,
            (
                "-cp",
                worker_jars.classpath(),
                MAIN_CLASS,
                str(worker_file),
                *(str(p) for p in connector_files),
            ),
            archive_files=tuple(worker_jars.files),
            system_properties={"log4j2.configurationFile": str(log4j)},
            private_files={secrets_file(data_dir): render_properties(secrets)},
            keep_private_files=True,  # the connectors read them when (re)started
            ready=lambda running: connectors_running(running.host, running.port, names),
            log_file=log_file or data_dir / "connect.log",
            cwd=data_dir,
            timeout=timeout,
            poll_interval=0.2,
        ),
    )
    return KafkaConnectWorker(**running.common(), data_dir=data_dir, connectors=names)


def connector_status(rest_url: str, name: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{rest_url}/connectors/{name}/status", timeout=10) as r:
        return dict(json.loads(r.read()))


def connectors_running(host: str, port: int, names: tuple[str, ...]) -> str | None:
    """None once the REST API answers and every connector and each of its tasks reports
    RUNNING; a FAILED one raises. (Jetty listens, and answers 404, before the API is up.)"""
    rest_url = f"http://{host}:{port}"
    if not http_ok(rest_url + "/connectors"):
        return "REST API not ready"
    states = [connector_status(rest_url, name) for name in names]
    failed = [t for s in states for t in s.get("tasks", []) if t.get("state") == "FAILED"] + [
        s for s in states if s.get("connector", {}).get("state") == "FAILED"
    ]
    if failed:
        trace = str(failed[0].get("trace") or failed[0])[:2000]
        raise KafkaConnectError(f"connector failed: {trace}")
    if all(
        s.get("connector", {}).get("state") == "RUNNING"
        and s.get("tasks")
        and all(t.get("state") == "RUNNING" for t in s["tasks"])
        for s in states
    ):
        return None
    return str(states)
