"""Change data capture end to end, every component real and on loopback (docs/cdc.md):

PostgreSQL 15 (Debian's package, a private cluster, SCRAM auth, `wal_level=logical`) ->
Debezium's PostgreSQL connector 3.6.1.Final on Kafka Connect (pgoutput, a publication, a
slot; Avro through the registry, or JSON with embedded schemas) -> Apache Kafka -> `tableflow apply` / `tableflow run`
-> Iceberg tables on S3 behind the REST catalog -> read back by pyiceberg and Trino.

A seeded workload over customers / orders / order_items (foreign keys that cascade):
a Debezium initial snapshot of existing rows (~20k here; the >= 1M-row snapshot is
`benchmarks/cdc.py`'s), then inserts, updates, deletes, primary-key updates (a customer's
cascades to its orders, an order's moves its items' two-column keys), multi-statement
transactions and rollbacks, `ALTER TABLE orders ADD COLUMN` mid-stream, a PostgreSQL
restart. `tableflow apply` between phases, kill -9 of tableflow mid-apply, `tableflow run`
through the last phase. After each phase the topics, reduced by an independent model
(tests/cdc_model.py), equal `SELECT * FROM` each table (that is Debezium's capture
checked); and every Iceberg table equals its PostgreSQL table, value by value.

TABLEFLOW_CDC_SEED picks another workload; TABLEFLOW_CDC_CUSTOMERS another snapshot size.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tableflow_core.dev.apicurio_server import CCOMPAT_PATH
from tableflow_core.dev.kafka_connect import (
    APICURIO_CONVERTER_LOCK,
    DEBEZIUM_POSTGRES_LOCK,
    KafkaConnectWorker,
    apicurio_avro_converters,
)
from tests.cdc_model import (
    AvroEnvelopes,
    Envelopes,
    JsonEnvelopes,
    Key,
    Row,
    first_difference,
    read_topic,
    reduce_to_mirror,
)
from tests.cdc_workload import (
    KEYS,
    TABLES,
    Workload,
    add_column_mid_stream,
    create_schema,
    load_snapshot,
    qualified,
    source_rows,
)
from tests.fixtures.kafka_server import ApacheKafka
from tests.fixtures.postgres import PostgresCluster, connect, prepare_capture, start_debezium
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.fixtures.stack import unique_name
from tests.fixtures.trino import trino_rows
from tests.plan_project import write_project
from tests.support.trino_server import TrinoServer

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("TABLEFLOW_CDC_SEED", "44"))
SNAPSHOT_CUSTOMERS = int(os.environ.get("TABLEFLOW_CDC_CUSTOMERS", "2000"))  # ~20k rows
CAPTURE_TIMEOUT = 180.0
# The case's converter -> the project's key and value formats (docs/cdc.md).
FORMATS = {"json": "connect_json", "avro": "avro"}


def source_mirror(cluster: PostgresCluster, table: str) -> dict[Key, Row]:
    with connect(cluster.server) as db:
        return {tuple(r[c] for c in KEYS[table]): r for r in source_rows(db, table)}


def wait_until_captured(
    kafka: ApacheKafka, cluster: PostgresCluster, prefix: str, envelopes: Envelopes
) -> dict[str, dict[str, int]]:
    """Until each topic, reduced to a mirror, equals its table: Debezium caught up."""
    deadline = time.monotonic() + CAPTURE_TIMEOUT
    config = kafka.client_config()
    ops: dict[str, dict[str, int]] = {}
    for table in TABLES:
        expected = source_mirror(cluster, table)
        while True:
            mirror, ops[table] = reduce_to_mirror(
                read_topic(config, f"{prefix}.public.{table}"), KEYS[table], envelopes
            )
            difference = first_difference(mirror, expected)
            if difference is None:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"{prefix}.public.{table} vs the source: {difference}")
            time.sleep(1.0)
    return ops


def project_tables(prefix: str, value_format: str) -> list[dict[str, Any]]:
    return [
        {
            "name": table,
            "topic": f"{prefix}.public.{table}",
            "mode": "upsert",
            "key_columns": list(KEYS[table]),
            "key": {"format": FORMATS[value_format]},
            "value": {"format": FORMATS[value_format], "envelope": "debezium"},
            "refresh_interval": "2s",
        }
        for table in TABLES
    ]


def tableflow(root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tableflow_core", "--project-dir", str(root), *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
        check=False,
    )


def apply_killed_midway(root: Path, after_seconds: float) -> int:
    """`tableflow apply` in its own session, SIGKILLed (with its Spark JVM) after a delay."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tableflow_core", "--project-dir", str(root), "apply",
         "--auto-approve"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        process.wait(timeout=after_seconds)
    except subprocess.TimeoutExpired:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return process.returncode


def iceberg_rows(catalog: Any, namespace: str, table: str) -> tuple[dict[Key, Row], list[str]]:
    loaded = catalog.load_table((namespace, table))
    columns = [f.name for f in loaded.schema().fields]
    rows = loaded.scan().to_arrow().to_pylist()
    return {tuple(r[c] for c in KEYS[table]): r for r in rows}, columns


def assert_tables_equal_source(
    cluster: PostgresCluster, catalog: Any, namespace: str, trino: TrinoServer | None = None
) -> None:
    for table in TABLES:
        expected = source_mirror(cluster, table)
        got, columns = iceberg_rows(catalog, namespace, table)
        source_columns = list(next(iter(expected.values())).keys()) if expected else columns
        assert [c for c in columns if not c.startswith("_")] == source_columns, table
        difference = first_difference(got, expected, source_columns)
        assert difference is None, f"pyiceberg {namespace}.{table}: {difference}"
        if trino is not None:
            names = ", ".join(f'"{c}"' for c in source_columns)
            rows, _ = trino_rows(trino, f'SELECT {names} FROM lake."{namespace}"."{table}"')
            by_key = {
                tuple(dict(zip(source_columns, r, strict=True))[c] for c in KEYS[table]): dict(
                    zip(source_columns, r, strict=True)
                )
                for r in rows
            }
            difference = first_difference(by_key, expected, source_columns)
            assert difference is None, f"Trino lake.{namespace}.{table}: {difference}"


@pytest.fixture
def debezium_worker() -> Iterator[list[KafkaConnectWorker]]:
    workers: list[KafkaConnectWorker] = []
    yield workers
    for worker in workers:
        worker.stop()


@dataclass(frozen=True)
class Capture:
    """How Debezium writes (its converters) and how the project and the model read it."""

    registry_url: str
    envelopes: Envelopes
    connector: dict[str, str]
    plugin_extras: tuple[tuple[str, str], ...]


def capture_for(value_format: str, request: pytest.FixtureRequest) -> Capture:
    if value_format == "json":  # embedded schemas: no registry is asked
        return Capture("http://127.0.0.1:1", JsonEnvelopes(), {}, ())
    registry = request.getfixturevalue("apicurio_registry")
    return Capture(
        registry.url,
        AvroEnvelopes(registry.url),
        apicurio_avro_converters(registry.url.replace(CCOMPAT_PATH, "/apis/registry/v2")),
        ((DEBEZIUM_POSTGRES_LOCK, APICURIO_CONVERTER_LOCK),),
    )


# Each case took 530-600 s under load average 6-24 on the shared 2-core machine: above the
# suite's default 600 s, so its own bound.
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("value_format", ["json", "avro"])
def test_postgres_tables_through_debezium_land_value_by_value(
    value_format: str,
    tmp_path: Path,
    kafka_broker: ApacheKafka,
    s3_catalog: S3CatalogServer,
    postgres_cluster: PostgresCluster,
    debezium_worker: list[KafkaConnectWorker],
    request: pytest.FixtureRequest,
) -> None:
    capture = capture_for(value_format, request)
    prefix = unique_name("pg")
    namespace = unique_name("cdc")
    with connect(postgres_cluster.server) as db:
        create_schema(db)
        snapshot = load_snapshot(db, SNAPSHOT_CUSTOMERS, seed=SEED)
    assert sum(snapshot.values()) >= 10 * SNAPSHOT_CUSTOMERS * 0.8
    password = prepare_capture(postgres_cluster.server, qualified())

    # Phase 1: Debezium's initial snapshot of the existing rows (op `r`).
    debezium_worker.append(
        start_debezium(
            tmp_path,
            kafka_broker.bootstrap,
            postgres_cluster.server,
            qualified(),
            prefix,
            password,
            extra=capture.connector,
            plugin_extras=capture.plugin_extras,
        )
    )
    ops = wait_until_captured(kafka_broker, postgres_cluster, prefix, capture.envelopes)
    assert {t: ops[t].get("r", 0) for t in TABLES} == snapshot

    root = write_project(
        tmp_path / "project",
        bootstrap=kafka_broker.bootstrap,
        registry_url=capture.registry_url,
        catalog_uri=s3_catalog.uri,
        credential=s3_catalog.credential,
        namespace=namespace,
        tables=project_tables(prefix, value_format),
        catalog_name="tf_s3",
        storage={"credentials": "vended"},
    )
    catalog = s3_catalog.pyiceberg_catalog()
    applied = tableflow(root, "apply", "--auto-approve")
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]
    assert_tables_equal_source(postgres_cluster, catalog, namespace)

    # Phase 2: streaming changes (every kind, 10% of transactions rolled back).
    with connect(postgres_cluster.server) as db:
        workload = Workload.from_database(db, seed=SEED + 1)
        workload.run(db, transactions=250)
    ops = wait_until_captured(kafka_broker, postgres_cluster, prefix, capture.envelopes)
    assert all(ops[t].get(op, 0) > 0 for t in TABLES for op in ("c", "u", "d", "tombstone"))
    apply_killed_midway(root, after_seconds=12.0)
    applied = tableflow(root, "apply", "--auto-approve")
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]
    assert_tables_equal_source(postgres_cluster, catalog, namespace)

    # Phase 3: a column added mid-stream, and PostgreSQL restarted between transactions.
    with connect(postgres_cluster.server) as db:
        workload.run(db, transactions=100)
        add_column_mid_stream(db)
        workload.channel = True
        workload.run(db, transactions=100)
    postgres_cluster.restart()
    with connect(postgres_cluster.server) as db:
        workload.run(db, transactions=150)
    wait_until_captured(kafka_broker, postgres_cluster, prefix, capture.envelopes)
    applied = tableflow(root, "apply", "--auto-approve")
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]
    assert_tables_equal_source(postgres_cluster, catalog, namespace)

    # Phase 4: `tableflow run` keeps the tables fresh while the source keeps changing.
    runner = subprocess.Popen(
        [sys.executable, "-m", "tableflow_core", "--project-dir", str(root), "run"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        with connect(postgres_cluster.server) as db:
            for _ in range(5):
                workload.run(db, transactions=60)
                time.sleep(1.0)
        wait_until_captured(kafka_broker, postgres_cluster, prefix, capture.envelopes)
        deadline = time.monotonic() + CAPTURE_TIMEOUT
        while True:
            try:
                assert_tables_equal_source(postgres_cluster, catalog, namespace)
                break
            except AssertionError:
                if time.monotonic() > deadline or runner.poll() is not None:
                    raise
                time.sleep(3.0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGTERM)
        try:
            runner.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
    assert workload.counts.get("rolled_back_transactions", 0) > 0
    assert all(workload.counts.get(op.__name__, 0) > 0 for op in _moves())

    trino = request.getfixturevalue("trino_on_s3_catalog")
    assert_tables_equal_source(postgres_cluster, catalog, namespace, trino=trino)
    project = yaml.safe_load((root / "tables" / "tables.yml").read_text())
    assert [t["name"] for t in project["tables"]] == list(TABLES)


def _moves() -> tuple[Any, ...]:
    return (Workload.move_customer, Workload.move_order, Workload.move_item)
