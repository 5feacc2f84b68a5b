"""The Kafka launcher itself: data survives a restart on other ports; misuse is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tableflow_core.dev.kafka_server import KafkaServerError, KafkaServerSettings, start_kafka
from tests.fixtures.kafka_server import read_partition


def test_restart_keeps_data_and_may_change_ports(tmp_path: Path) -> None:
    settings = KafkaServerSettings(data_dir=tmp_path / "kafka")
    first = start_kafka(settings)
    try:
        admin = AdminClient(first.client_config())
        admin.create_topics([NewTopic("kept", 1)])["kept"].result(timeout=30)
        producer = Producer(first.client_config(**{"linger.ms": 0}))
        for index in range(5):
            producer.produce("kept", value=str(index))
        producer.flush(10)
    finally:
        first.stop()
    assert not first.process.alive

    second = start_kafka(settings)  # free ports again: others than the first's
    try:
        assert second.port != first.port
        read = read_partition(second.client_config(), "kept", 0, 0)
        assert [value for _, _, value in read.records] == [str(i).encode() for i in range(5)]
    finally:
        second.stop()
    with pytest.raises(KafkaServerError, match="formatted without SCRAM users"):
        start_kafka(KafkaServerSettings(data_dir=tmp_path / "kafka", sasl_ssl=True))
