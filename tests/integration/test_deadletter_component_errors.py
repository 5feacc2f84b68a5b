"""Components stopped mid-run are named with their address.

A broker stopped mid-read (not "no progress at position -1001"), a catalog stopped
before the dead-letter write. Each test uses its own short-lived server process, so
stopping it disturbs no other test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tableflow_core.config.models.dead_letter import IcebergDeadLetter
from tableflow_core.deadletter.errors import DeadLetterTableError
from tableflow_core.deadletter.frames import spark_schema
from tableflow_core.deadletter.sinks import SinkContext, route_bad_records
from tableflow_core.deadletter.sinks.iceberg_table import create_dlq_table
from tableflow_core.dev import broker
from tableflow_core.dev.processes import BackgroundProcess, free_port
from tableflow_core.engine.spark_session import register_catalog
from tableflow_core.ingest.bad_records import BAD_RECORD_SCHEMA
from tableflow_core.kafka.admin import KafkaMetadataError, get_watermarks
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.kafka.range_reader import KafkaReadError, read_range
from tests.fixtures.catalog import start_catalog_server

pytestmark = pytest.mark.slow

HOST = "127.0.0.1"


@pytest.fixture()
def own_broker(tmp_path: Path) -> Iterator[tuple[str, BackgroundProcess]]:
    port = free_port(HOST)
    process = broker.start_broker(HOST, port, tmp_path / "data", tmp_path / "noida.log")
    try:
        yield f"{HOST}:{port}", process
    finally:
        process.stop()


def test_broker_stopped_mid_read_is_named(own_broker: tuple[str, BackgroundProcess]) -> None:
    bootstrap, process = own_broker
    topic = "mid-read"
    broker.create_topics(bootstrap, {topic: 1})
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(300):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(10) == 0
    conf = {"bootstrap.servers": bootstrap}
    # The range runs past the end of the log: the reader waits for offsets 300.. when the
    # broker goes away, as a run does when the broker dies before the range is complete.
    chunks = read_range(conf, OffsetRange(topic, 0, 0, 600), chunk_size=100, idle_timeout_s=3)
    first = next(chunks)
    assert [m.offset for m in first][:3] == [0, 1, 2]
    process.stop()
    with pytest.raises(KafkaReadError) as info:
        for _ in chunks:
            pass
    message = str(info.value)
    assert bootstrap in message
    assert "topic 'mid-read' partition 0" in message
    assert "at offset 300" in message and "-1001" not in message
    assert "last broker error" in message  # what librdkafka said (connection refused...)

    with pytest.raises(KafkaMetadataError) as meta:
        get_watermarks(conf, topic, timeout=2)
    assert bootstrap in str(meta.value) and "did not answer" in str(meta.value)


def test_catalog_stopped_mid_run_is_named_by_the_dlq_sink(spark: Any, tmp_path: Path) -> None:
    server = start_catalog_server(tmp_path / "catalog")
    name = f"tf_gone_{uuid.uuid4().hex[:8]}"
    try:
        register_catalog(spark, name, server.spark_properties())
        create_dlq_table(spark, name, "ops.bad_records")
    finally:
        server.process.stop()
    row = (
        "t", 0, 7, None, None, b"\x07", [], "decode", "FramingError", "wrong magic byte", "r",
        datetime.now(UTC),
    )  # fmt: skip
    bad = spark.createDataFrame([row], spark_schema(BAD_RECORD_SCHEMA))
    context = SinkContext(
        table="orders", run_id="r", spark_catalog=name, catalog_address=server.uri
    )
    target = IcebergDeadLetter(type="iceberg", table="ops.bad_records")
    with pytest.raises(DeadLetterTableError) as info:
        route_bad_records(bad, "dlq", target, context)
    message = str(info.value)
    assert f"catalog '{name}' at {server.uri}" in message and "ops.bad_records" in message
    assert "Connection refused" in message and "An error occurred while calling" not in message
