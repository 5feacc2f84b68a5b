"""The Apache Iceberg Kafka Connect sink (the peer tableflow is compared with) runs here.

Kafka Connect 4.3.1 standalone with the Iceberg 1.12.0 sink plugin built from Maven Central
jars, on Apache Kafka 4.4 (transactions: the sink commits its control-topic offsets
transactionally), our REST catalog and s3proxy. N JSON records produced; the sink
auto-creates the table and commits; pyiceberg reads exactly N rows with the produced
values, the snapshot carries the sink's commit id, and no secret reaches the worker's
files or log.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyiceberg.exceptions import NoSuchTableError

from tests.fixtures.catalog import unique_namespace
from tests.fixtures.kafka_connect import start_iceberg_sink
from tests.fixtures.kafka_server import ApacheKafka
from tests.fixtures.s3_catalog import S3CatalogServer

pytestmark = pytest.mark.slow

RECORDS = 5000


def test_the_sink_commits_exactly_the_produced_records(
    tmp_path: Path, apache_kafka: ApacheKafka, s3_catalog: S3CatalogServer
) -> None:
    topic = f"sink-{unique_namespace('t')}"
    apache_kafka.create_topic(topic, partitions=2)
    ns = unique_namespace("sink")
    catalog = s3_catalog.pyiceberg_catalog()
    catalog.create_namespace(ns)
    producer = Producer(apache_kafka.producer_config())
    for i in range(RECORDS):
        value = {"id": i, "name": f"n{i}", "amount": i / 4, "tags": [f"t{i % 3}"]}
        producer.produce(topic, key=str(i).encode(), value=json.dumps(value).encode())
    assert producer.flush(30) == 0

    worker = start_iceberg_sink(tmp_path, apache_kafka, s3_catalog, topic, f"{ns}.events")
    try:
        deadline = time.monotonic() + 120
        rows = -1
        while time.monotonic() < deadline:
            status = worker.connector_status("iceberg-sink")
            assert status["tasks"][0]["state"] == "RUNNING", status["tasks"][0].get("trace")
            try:
                rows = catalog.load_table((ns, "events")).scan().count()
            except NoSuchTableError:
                rows = -1
            if rows >= RECORDS:
                break
            time.sleep(0.5)
        time.sleep(3)  # a few more commit intervals: nothing may be added twice
        table = catalog.load_table((ns, "events"))
        data = table.scan().to_arrow()
    finally:
        worker.stop()

    assert data.num_rows == RECORDS
    got = sorted(
        zip(
            data["id"].to_pylist(),
            data["name"].to_pylist(),
            data["amount"].to_pylist(),
            strict=True,
        )
    )
    assert got == [(i, f"n{i}", i / 4) for i in range(RECORDS)]
    tags = dict(zip(data["id"].to_pylist(), data["tags"].to_pylist(), strict=True))
    assert all(tags[i] == [f"t{i % 3}"] for i in range(RECORDS))
    summary = table.current_snapshot().summary
    assert summary["kafka.connect.commit-id"]
    # No secret in the worker's folder (its properties, its log).
    secrets = [
        s3_catalog.client_secret,
        s3_catalog.s3.credentials.secret_access_key.get_secret_value(),
    ]
    for path in (tmp_path / "connect").glob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert not any(secret in text for secret in secrets), path
