"""What the launchers of issue 30 write, without starting anything: loopback binds, secrets
kept out of command lines and logged files, the properties each engine needs."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from tableflow_core.jvm.artifacts import load_lock
from tests.support.kafka_connect import (
    DEBEZIUM_POSTGRES_LOCK,
    PLUGIN_LEAVES_OUT,
    IcebergSinkCatalog,
    KafkaConnectSettings,
    PostgresSource,
    debezium_postgres_source,
    iceberg_sink,
    worker_properties,
)
from tests.support.nessie_server import NessieS3, NessieSettings, nessie_properties
from tests.support.trino_server import TrinoIcebergCatalog, server_properties

SECRET = "s3cr3t-value"


def test_trino_binds_loopback_and_schedules_on_itself(tmp_path: Path) -> None:
    props = server_properties("127.0.0.1", 8123, tmp_path, tmp_path / "p", tmp_path / "c")
    assert props["node.bind-ip"] == "127.0.0.1"
    assert props["discovery.uri"] == "http://127.0.0.1:8123"
    assert props["coordinator"] == props["node-scheduler.include-coordinator"] == "true"
    assert "node.data-dir" not in props  # Trino refuses it in config.properties


def test_trino_iceberg_catalog_properties() -> None:
    catalog = TrinoIcebergCatalog(
        name="lake",
        rest_uri="http://127.0.0.1:1/",
        credential=SecretStr(f"id:{SECRET}"),
        oauth2_server_uri="http://127.0.0.1:1/v1/oauth/tokens",
        s3_endpoint="http://127.0.0.1:2",
        s3_access_key_id="key",
        s3_secret_access_key=SecretStr(SECRET),
        vended_credentials=True,
    )
    props = catalog.catalog_properties()
    assert props["iceberg.rest-catalog.uri"] == "http://127.0.0.1:1"
    assert props["iceberg.rest-catalog.security"] == "OAUTH2"
    assert props["fs.native-s3.enabled"] == "true"
    assert props["s3.path-style-access"] == "true"
    assert props["s3.aws-secret-key"] == SECRET  # only ever written to a 0600 file
    assert SECRET not in repr(catalog)
    bare = TrinoIcebergCatalog(name="n", rest_uri="http://127.0.0.1:3/iceberg")
    assert "iceberg.rest-catalog.security" not in bare.catalog_properties()


def test_nessie_command_line_properties_carry_no_key(tmp_path: Path) -> None:
    settings = NessieSettings(
        data_dir=tmp_path,
        warehouse="s3://warehouse/n",
        s3=NessieS3(
            endpoint="http://127.0.0.1:2", access_key_id="key", secret_access_key=SecretStr(SECRET)
        ),
    )
    props = nessie_properties(settings)
    assert props["nessie.catalog.service.s3.default-options.access-key"].startswith(
        "urn:nessie-secret:quarkus:"
    )
    assert SECRET not in "".join(f"{k}={v}" for k, v in props.items())


def test_the_sink_connector_keeps_secrets_apart() -> None:
    sink = iceberg_sink(
        "s",
        "topic",
        "ns.t",
        IcebergSinkCatalog(uri="http://127.0.0.1:1", credential=SecretStr(f"id:{SECRET}")),
        commit_interval_ms=1000,
    )
    props = dict(sink.properties)
    assert SECRET not in "".join(props.values())
    assert dict(sink.secrets)["iceberg.catalog.credential"].get_secret_value() == f"id:{SECRET}"
    assert props["iceberg.control.commit.interval-ms"] == "1000"
    assert props["iceberg.catalog.header.X-Iceberg-Access-Delegation"] == "vended-credentials"


def test_the_connect_worker_reads_plain_json_and_binds_loopback(tmp_path: Path) -> None:
    props = worker_properties(
        KafkaConnectSettings(data_dir=tmp_path, bootstrap="127.0.0.1:9"), 8083, tmp_path
    )
    assert props["listeners"] == "http://127.0.0.1:8083"
    assert props["value.converter"] == "org.apache.kafka.connect.json.JsonConverter"
    assert props["value.converter.schemas.enable"] == "false"


def test_locks_pin_the_versions_the_findings_depend_on() -> None:
    def versions(name: str) -> dict[str, str]:
        return {a.coordinate.artifact: a.coordinate.version for a in load_lock(name).artifacts}

    # The Iceberg 1.12.0 sink needs AppInfoParser where Kafka 4.3 has it (4.4 moved it).
    assert versions("kafka-connect")["connect-runtime"] == "4.3.1"
    sink = versions("iceberg-kafka-connect")
    assert sink["iceberg-kafka-connect"] == sink["iceberg-aws-bundle"] == "1.12.0"
    assert sink["kafka-clients"] == "4.3.1"
    assert "hadoop-client-api" in sink  # Parquet's writer needs Hadoop's Configuration
    assert versions("trino")["trino-server"] == "476"
    assert versions("nessie")["nessie-quarkus"] == "0.99.0"
    assert versions("delta-spark") == {"delta-spark_2.12": "3.3.2", "delta-storage": "3.3.2"}
    assert versions("hadoop-s3a") == {"hadoop-aws": "3.3.4", "aws-java-sdk-bundle": "1.12.262"}


def test_debezium_source_keeps_the_password_in_the_secrets_file() -> None:
    source = PostgresSource(
        host="127.0.0.1",
        port=5433,
        database="shop",
        user="debezium",
        password=SecretStr(SECRET),
        tables=("public.orders", "public.order_items"),
    )
    connector = debezium_postgres_source("pg", source, "pg", partitions=3)
    props = dict(connector.properties)
    assert props["plugin.name"] == "pgoutput"
    assert props["table.include.list"] == "public.orders,public.order_items"
    assert props["publication.autocreate.mode"] == "disabled"
    assert props["value.converter.schemas.enable"] == "true"
    assert props["topic.creation.default.partitions"] == "3"
    assert SECRET not in repr(props)
    assert [k for k, _ in connector.secrets] == ["database.password"]


def test_debezium_plugin_folder_takes_the_workers_kafka_jars(tmp_path: Path) -> None:
    lock = load_lock(DEBEZIUM_POSTGRES_LOCK)
    assert {str(r) for r in lock.roots} == {"io.debezium:debezium-connector-postgres:3.6.1.Final"}
    debezium = [a for a in lock.artifacts if a.coordinate.group == "io.debezium"]
    assert debezium and all(a.coordinate.version == "3.6.1.Final" for a in debezium)
    leaves_out = PLUGIN_LEAVES_OUT[DEBEZIUM_POSTGRES_LOCK]
    assert "kafka-clients" in leaves_out and "connect-api" in leaves_out
