"""A broker that stops mid-read is named in the error (not "no progress at position -1001").

Uses its own short-lived noida-db process, so stopping it disturbs no other test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tableflow_core.dev import broker
from tableflow_core.dev.processes import BackgroundProcess, free_port
from tableflow_core.kafka.admin import KafkaMetadataError, get_watermarks
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.kafka.range_reader import KafkaReadError, read_range

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
