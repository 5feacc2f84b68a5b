"""The prod-shaped target: `tableflow plan` and `apply`, as users run them, against Kafka's
SASL_SSL listener (SCRAM-SHA-512 over TLS, trusting a CA the test's broker made), the
password given through `env_var` only. Avro through the registry, written with
confluent-kafka's serializer in transactions (one aborted); the table is compared with
what was committed, and the password appears in no output and no file the runs leave.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.avro_records import avro_record, nullable
from tests.fixtures.apply_env import tableflow_process
from tests.fixtures.catalog import CatalogServer, unique_namespace
from tests.fixtures.kafka_server import ApacheKafka
from tests.fixtures.stack import SchemaRegistryServer, unique_name

pytestmark = pytest.mark.slow

PASSWORD_VARIABLE = "TF_TEST_KAFKA_PASSWORD"
PAYMENT = avro_record(
    "Payment",
    namespace="shop",
    id="long",
    amount={"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
    currency="string",
    note=nullable("string"),
)


def _write_project(
    root: Path,
    kafka: ApacheKafka,
    registry: SchemaRegistryServer,
    catalog: CatalogServer,
    topic: str,
) -> str:
    config = kafka.client_config()
    namespace = unique_namespace("prod")
    project = {
        "name": "payments",
        "default_target": "prod",
        "targets": {
            "prod": {
                "kafka": {
                    "bootstrap_servers": kafka.bootstrap,
                    "security": {
                        "protocol": "SASL_SSL",
                        "sasl_mechanism": "SCRAM-SHA-512",
                        "sasl_username": config["sasl.username"],
                        "sasl_password": "{{ env_var('" + PASSWORD_VARIABLE + "') }}",
                        "ssl_ca_location": config["ssl.ca.location"],
                    },
                },
                "schema_registry": {"url": registry.url},
                "catalog": {
                    "type": "rest",
                    "name": "tf_prod",
                    "uri": catalog.uri,
                    "credential": catalog.credential,
                    "properties": {
                        "oauth2-server-uri": catalog.uri + "/v1/oauth/tokens",
                        "scope": "catalog",
                    },
                },
            }
        },
        "defaults": {"namespace": namespace},
    }
    table = {"name": "payments", "topic": topic, "value": {"format": "avro"}}
    (root / "tables").mkdir(parents=True)
    (root / "tableflow_project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
    (root / "tables" / "payments.yml").write_text(yaml.safe_dump({"tables": [table]}))
    return namespace


def _tableflow(root: Path, password: str, *args: str) -> subprocess.CompletedProcess[str]:
    return tableflow_process(
        root, *args, extra_env={PASSWORD_VARIABLE: password}, timeout=400, merge_stderr=False
    )


def _files_containing(root: Path, secret: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret in p.read_bytes()]


def test_plan_and_apply_over_sasl_ssl_scram_with_nothing_secret_printed(
    apache_kafka_sasl: ApacheKafka,
    schema_registry: SchemaRegistryServer,
    catalog_server: CatalogServer,
    tmp_path: Path,
) -> None:
    from decimal import Decimal

    kafka = apache_kafka_sasl
    password = kafka.client_config()["sasl.password"]
    topic = kafka.create_topic(unique_name("payments"), partitions=2)
    serializer = AvroSerializer(
        SchemaRegistryClient({"url": schema_registry.url}), json.dumps(PAYMENT)
    )
    producer = Producer(
        kafka.producer_config(**{"transactional.id": f"tx-{topic}", "linger.ms": 0})
    )
    producer.init_transactions(30)
    model: dict[int, dict[str, Any]] = {}

    def transaction(ids: range, commit: bool) -> None:
        producer.begin_transaction()
        for i in ids:
            value = {
                "id": i,
                "amount": Decimal(i * 7) / 100,
                "currency": "EUR",
                "note": None if i % 3 else f"n{i}",
            }
            data = serializer(value, SerializationContext(topic, MessageField.VALUE))
            producer.produce(topic, key=str(i), value=data, partition=i % 2)
            if commit:
                model[i] = value
        assert producer.flush(10) == 0  # the aborted records reach the log, then the marker
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    transaction(range(0, 40), commit=True)
    transaction(range(40, 50), commit=False)
    transaction(range(50, 60), commit=True)
    kafka.stable_offsets(topic, 2)  # the last commit's markers are written after it returns

    root = tmp_path / "payments"
    namespace = _write_project(root, kafka, schema_registry, catalog_server, topic)
    plan = _tableflow(root, password, "plan")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert topic in plan.stdout
    apply = _tableflow(root, password, "apply", "--auto-approve")
    assert apply.returncode == 0, apply.stdout[-3000:] + apply.stderr[-3000:]

    rows = catalog_server.pyiceberg_catalog().load_table(f"{namespace}.payments").scan().to_arrow()
    landed = {r["id"]: r for r in rows.to_pylist()}
    assert sorted(landed) == sorted(model)  # committed ones once, no aborted record
    for i, value in model.items():
        assert (landed[i]["amount"], landed[i]["currency"], landed[i]["note"]) == (
            value["amount"], value["currency"], value["note"]
        )  # fmt: skip
    results = json.loads((root / "target" / "run_results.json").read_text())
    (table,) = results["tables"]
    assert table["records_written"] == 50
    # Per partition 20 + 5 (aborted) + 5 records and a control record after each
    # transaction: the committed offsets are past all of them.
    assert table["offsets_after"] == {"0": 33, "1": 33}

    # A wrong password fails plan with a message that says so, and prints neither.
    wrong = _tableflow(root, "not-the-password", "plan")
    assert wrong.returncode != 0
    assert "authentication failed" in wrong.stderr and "invalid credentials" in wrong.stderr
    for run in (plan, apply, wrong):
        assert password not in run.stdout + run.stderr
        assert "not-the-password" not in run.stdout + run.stderr
    assert _files_containing(root, password.encode()) == []
