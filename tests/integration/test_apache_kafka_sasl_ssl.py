"""A SASL_SSL listener (SCRAM-SHA-512 over TLS, a CA made for the session) on Kafka 4.4.

The launcher formats the storage with the SCRAM users (`--add-scram`, passed in a 0600
argument file, never on a command line) and serves TLS from a PEM keystore; clients
trust `tls/ca.pem`. Nothing secret reaches the log or a repr.
"""

from __future__ import annotations

import stat
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from tests.fixtures.kafka_server import ApacheKafka, read_partition


def test_scram_sha_512_over_tls_produces_and_consumes(apache_kafka_sasl: ApacheKafka) -> None:
    config = apache_kafka_sasl.client_config()
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanism"] == "SCRAM-SHA-512"
    topic = apache_kafka_sasl.create_topic(f"secure-{uuid.uuid4().hex[:8]}", partitions=2)
    producer = Producer(
        apache_kafka_sasl.producer_config(**{"transactional.id": f"tx-{topic}", "linger.ms": 0})
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for index in range(10):
        producer.produce(topic, key=str(index), value=f"v{index}", partition=0)
    producer.commit_transaction(30)
    apache_kafka_sasl.stable_offsets(topic, 2)  # the marker is written after the commit returns

    read = read_partition(
        apache_kafka_sasl.consumer_config(**{"isolation.level": "read_committed"}), topic, 0, 0
    )
    assert read.errors == []
    assert [value for _, _, value in read.records] == [f"v{i}".encode() for i in range(10)]
    assert read.position == 11  # ten records and the commit marker


def test_wrong_password_and_plaintext_are_refused(apache_kafka_sasl: ApacheKafka) -> None:
    errors: list[KafkaError] = []
    wrong = apache_kafka_sasl.client_config(
        **{"sasl.password": "not-the-password", "error_cb": errors.append, "log_level": 0}
    )
    admin = AdminClient(wrong)
    with pytest.raises(KafkaException) as failed:
        admin.list_topics(timeout=3)
    assert failed.value.args[0].code() == KafkaError._TRANSPORT
    admin.poll(1)  # serves the error callback
    # list_topics only says "transport failure"; the error callback names the cause.
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors)
    assert any("invalid credentials" in e.str() for e in errors)

    plaintext = Consumer(
        {"bootstrap.servers": apache_kafka_sasl.bootstrap, "group.id": "g", "log_level": 0}
    )
    try:
        with pytest.raises(KafkaException):
            plaintext.list_topics(timeout=3)
    finally:
        plaintext.close()


def test_secrets_stay_out_of_logs_reprs_and_readable_files(
    apache_kafka_sasl: ApacheKafka,
) -> None:
    server = apache_kafka_sasl
    assert server.credentials is not None
    password = server.credentials.password
    assert password not in repr(server)
    log = server.process.log_file.read_text(errors="replace")
    assert password not in log
    assert "storedKey" not in log and "ScramCredentialRecord" not in log
    for private in ("server.properties", "credentials.json", "tls/server.pem"):
        mode = stat.S_IMODE((server.data_dir / private).stat().st_mode)
        assert mode == 0o600, (private, oct(mode))
    assert not (server.data_dir / "format.args").exists()
