"""Trino reads what `tableflow apply` wrote on S3, told only the catalog URL and a credential.

Real components throughout: Apache Kafka, the registry, s3proxy behind the STS gateway,
the catalog server vending temporary table-scoped credentials (`--sts-role-arn`), the
`tableflow` CLI (its own Spark JVM, `credentials: vended`), Trino 476. Trino's catalog
file names the REST URI and the OAuth2 credential, nothing about S3: it takes the
endpoint, region and the session credentials from each table's `loadTable` answer.

One project, applied twice by the CLI:
- `orders`: an append table (Avro), schema v2 (a new column) in the second apply;
- `payments`: an upsert table (Avro keys, tombstones), merge-on-read, so the second
  apply leaves position delete files; schema v2 too;
- `customers`: a JSON Schema table masking `email`, `phone` (hash) and `card`
  (partial), dead-lettering its bad records to an Iceberg table `bad_customers`
  (payloads masked).
Every table is read by Trino and by pyiceberg and compared value by value; the masked
ones must show masked values and never a clear one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from tests.fixtures.apply_env import run_cli
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.lake import Lake
from tests.fixtures.projects import StackProject
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.fixtures.trino import assert_trino_reads_as_pyiceberg, start_trino_for
from tests.integration.test_masked_values_nowhere import (
    CHECKS,
    FRAGMENTS,
    RECORDS,
    TRANSFORMS,
    produce_customers,
)
from tests.integration.test_upsert import AFTER_2, RUN_1, RUN_2, Topic, table_config
from tests.support.sts_gateway import StsGateway
from tests.support.trino_server import TrinoIcebergCatalog, TrinoServer

pytestmark = pytest.mark.slow

MORE_CUSTOMERS = [
    {"id": i, "email": f"user{i}@example.com", "phone": 15550200 + i, "card": f"4000{i:012d}"}
    for i in range(10, 16)
]


@pytest.fixture
def lake(sts_catalog: S3CatalogServer) -> Lake:
    """Projects of this module write through the catalog that vends temporary keys."""
    return Lake("s3", sts_catalog, "tf_sts", {"credentials": "vended"})


@pytest.fixture(scope="module")
def trino(
    tmp_path_factory: pytest.TempPathFactory, sts_catalog: S3CatalogServer, sts_gateway: StsGateway
) -> Iterator[TrinoServer]:
    """Trino with the catalog URL and the OAuth2 credential; no S3 key of any kind.

    Trino 476 takes only the keys from a table's vended config, not the endpoint or the
    addressing style, and its S3 module will not start without a region: those three
    (where the store is, not who may read it) stay in its catalog file
    (docs/object-storage.md)."""
    catalog = TrinoIcebergCatalog(
        name="lake",
        rest_uri=sts_catalog.uri,
        credential=SecretStr(sts_catalog.credential),
        oauth2_server_uri=sts_catalog.uri + "/v1/oauth/tokens",
        vended_credentials=True,
        s3_endpoint=sts_gateway.endpoint,
    )
    properties = catalog.catalog_properties()
    assert sorted(k for k in properties if k.startswith("s3.")) == [
        "s3.endpoint", "s3.path-style-access", "s3.region",
    ], properties  # fmt: skip
    server = start_trino_for(tmp_path_factory.mktemp("trino-vended"), [catalog])
    try:
        yield server
    finally:
        server.stop()


def apply_cli(root: Path) -> str:
    status, output = run_cli(root, "apply", "--auto-approve")
    assert status == 0, output[-3000:]
    return output


def clear_values_in(text: str) -> list[str]:
    return [fragment for fragment in FRAGMENTS if fragment in text]


def test_trino_reads_applied_tables_with_vended_temporary_credentials(
    trino: TrinoServer,
    sts_catalog: S3CatalogServer,
    sts_gateway: StsGateway,
    stack_project: StackProject,
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistryServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TF_TEST_MASK_SALT", "salt-for-the-trino-test")
    namespace = unique_namespace("trino_vended")
    dlq_namespace = unique_namespace("trino_dlq")
    orders = Topic(kafka_broker, schema_registry.url, "avro")
    payments = Topic(kafka_broker, schema_registry.url, "avro")
    customers = produce_customers(kafka_broker, schema_registry, RECORDS + MORE_CUSTOMERS)
    tables = [
        {"name": "orders", "topic": orders.name, "metadata_columns": []},
        {"name": "payments", "topic": payments.name, "metadata_columns": [],
         **table_config(payments)},
        {"name": "customers", "topic": customers, "metadata_columns": [],
         "value": {"format": "json_schema"}, "transforms": TRANSFORMS, "checks": CHECKS,
         "on_error": "dlq", "dlq": {"type": "iceberg", "table": f"{dlq_namespace}.bad_customers"}},
    ]  # fmt: skip
    root = stack_project(namespace=namespace, tables=tables, name=unique_name("trino"))
    outputs: list[str] = []

    refused_before = len(sts_gateway.refusals)
    orders.produce([r for r in RUN_1 if r[2] is not None])
    payments.produce(RUN_1)
    outputs.append(apply_cli(root))
    orders.produce([(0, 7, ("g", 7, "nl")), (1, 8, ("h", 8, None))], version=2)
    payments.produce(RUN_2)
    payments.produce([(0, 2, ("b2", 22, "fr")), (1, 5, ("e2", 55, "de"))], version=2)
    outputs.append(apply_cli(root))
    assert clear_values_in("".join(outputs)) == []

    catalog = sts_catalog.pyiceberg_catalog()
    upserts = catalog.load_table((namespace, "payments"))
    assert any(task.delete_files for task in upserts.scan().plan_files())  # position deletes
    assert "country" in [f.name for f in upserts.schema().fields]

    used_before = sts_gateway.accepted_minted
    read: dict[str, list[tuple[Any, ...]]] = {}
    names: dict[str, list[str]] = {}
    for ns, table in [
        (namespace, "orders"),
        (namespace, "payments"),
        (namespace, "customers"),
        (dlq_namespace, "bad_customers"),
    ]:
        schema, rows, _types = assert_trino_reads_as_pyiceberg(trino, "lake", catalog, ns, table)
        read[table], names[table] = rows, [f.name for f in schema.fields]
    assert sts_gateway.accepted_minted > used_before  # Trino read with minted credentials

    def column(table: str, name: str) -> list[Any]:
        return [row[names[table].index(name)] for row in read[table]]

    assert len(read["orders"]) == len([r for r in RUN_1 if r[2] is not None]) + 2
    countries = column("orders", "country")
    assert countries.count("nl") == 1 and countries.count(None) == len(countries) - 1
    after: dict[int, tuple[Any, ...]] = {**AFTER_2, 2: ("b2", 22), 5: ("e2", 55)}
    assert sorted(zip(column("payments", "id"), column("payments", "name"), strict=True)) == (
        sorted((k, v[0]) for k, v in after.items())
    )
    # Masked: what Trino shows is the masked value, never the clear one.
    good = [RECORDS[0], *MORE_CUSTOMERS]
    assert sorted(column("customers", "id")) == sorted(r["id"] for r in good)
    for card, record in zip(
        column("customers", "card"), sorted(good, key=lambda r: r["id"]), strict=True
    ):
        assert card == "*" * (len(record["card"]) - 4) + record["card"][-4:]
    assert all(len(e) == 64 for e in column("customers", "email"))
    assert sorted(column("bad_customers", "source_offset")) == [1, 2, 3]
    assert clear_values_in(json.dumps(read, default=repr)) == []
    # Nothing the CLI's Spark, pyiceberg or Trino sent was refused (no expired credential).
    assert sts_gateway.refusals[refused_before:] == []

    # No vended secret or session token in the CLI's output, its files, the catalog's
    # log (requests and answers pass through it) or Trino's logs.
    minted = sts_gateway.minted_secrets()
    assert len(minted) >= 4
    texts = {"cli output": "".join(outputs)}
    texts["catalog log"] = sts_catalog.process.log_file.read_text(errors="replace")
    for path in [*(root / "target").rglob("*"), *trino.data_dir.rglob("*")]:
        if path.is_file() and path.stat().st_size < 50_000_000:
            texts[str(path)] = path.read_bytes().decode("utf-8", "replace")
    leaked = [where for where, text in texts.items() if any(m in text for m in minted)]
    assert leaked == []
