"""The consumers' bounded pre-fetch (kafka.admin.BOUNDED_FETCH): librdkafka accepts it,
and a user's `kafka.config` wins over it."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException

from tableflow_core.kafka.admin import BOUNDED_FETCH, consumer_conf

NOWHERE = {"bootstrap.servers": "127.0.0.1:9"}  # never contacted: the conf is only built


def _accepted(conf: dict[str, object]) -> None:
    Consumer(conf).close()  # librdkafka validates the combination at construction


def test_defaults_bound_the_prefetch_and_librdkafka_accepts_them() -> None:
    conf = consumer_conf(NOWHERE)
    for key, value in BOUNDED_FETCH.items():
        assert conf[key] == value
    assert (
        int(conf["queued.max.messages.kbytes"]) * 1024 <= 64 * 1024 * 1024
    )  # below librdkafka's 64 MB
    _accepted(conf)


def test_a_full_queue_does_not_hold_the_next_fetch_for_a_second() -> None:
    # librdkafka's default fetch.queue.backoff.ms (1000) made each 1 MB fetch of small
    # records wait ~0.6 s once the bounded queue filled: 12x the read's wall time.
    conf = consumer_conf(NOWHERE)
    assert int(conf["fetch.queue.backoff.ms"]) <= int(conf.get("fetch.wait.max.ms", 500))
    assert int(conf["fetch.queue.backoff.ms"]) <= 10


def test_the_users_kafka_config_wins() -> None:
    conf = consumer_conf(
        {**NOWHERE, "queued.max.messages.kbytes": "65536", "fetch.max.bytes": "52428800"}
    )
    assert conf["queued.max.messages.kbytes"] == "65536"
    assert conf["fetch.max.bytes"] == "52428800"
    _accepted(conf)


def test_a_lower_receive_limit_lowers_the_fetch_size_with_it() -> None:
    conf = consumer_conf({**NOWHERE, "receive.message.max.bytes": "10000000"})
    assert int(conf["fetch.max.bytes"]) == 10000000 - 512
    _accepted(conf)


def test_librdkafka_refuses_a_fetch_size_above_the_receive_limit() -> None:
    """Why consumer_conf lowers fetch.max.bytes: the raw combination does not start."""
    raw = {**consumer_conf(NOWHERE), "receive.message.max.bytes": "10000000"}
    with pytest.raises(KafkaException, match=r"receive\.message\.max\.bytes"):
        _accepted(raw)
