"""Broker metadata a plan needs: partitions, watermarks, offsets for a timestamp."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tableflow_core.errors import TableflowError

# librdkafka's default `receive.message.max.bytes`: a fetch response may not exceed it
# (Kafka brokers honour `fetch.max.bytes`, so a fetch stays below it).
DEFAULT_RECEIVE_LIMIT = 100_000_000

# What one consumer may hold ahead of the application (librdkafka's defaults: 64 MB and
# 100k messages per partition, 50 MB per fetch). A range reader runs in each Spark task, a
# task per core, so these bound the client's share of a worker's memory against a broker
# that honours fetch limits: 16 MB still keeps a fetch ahead of the decoder, which takes
# ~10 MB/s per core (benchmarks/memory.py measures the client apart). The user's
# `kafka.config` overrides any of them.
# Once its queue holds `queued.min.messages`, librdkafka waits `fetch.queue.backoff.ms`
# (default 1000 ms) before it fetches again, even when the application emptied the queue
# meanwhile: at ~50 bytes a record a 1 MB fetch fills the queue, so a task read a 250k
# range in 7.3-8.3 s instead of 0.6-0.8 s (benchmarks/decode.py's in-task wall time).
BOUNDED_FETCH: dict[str, str] = {
    "queued.max.messages.kbytes": "16384",
    "queued.min.messages": "20000",
    "fetch.queue.backoff.ms": "10",
    "fetch.max.bytes": "16777216",
}


class KafkaMetadataError(TableflowError, RuntimeError):
    """The broker could not tell us about a topic (missing topic, broker down)."""


class KafkaUnreachableError(KafkaMetadataError):
    """No bootstrap server of `address` accepted a connection."""

    component_down = True

    def __init__(self, address: str, detail: str) -> None:
        super().__init__(detail)
        self.address = address

    def user_message(self) -> str:
        return f"kafka at {self.address} is not reachable: {self}"


# A broker that does not accept a TCP connection within this is reported as down.
CONNECT_TIMEOUT_S = 2.0

LIBRDKAFKA_LOGGER = logging.getLogger("tableflow.kafka.librdkafka")


class DebugLogger:
    """librdkafka's log lines, routed to Python logging at DEBUG.

    Without a logger librdkafka writes every connection retry to stderr (hundreds of
    lines when a broker is down); tableflow reports the failure itself, once.
    """

    def log(self, _level: int, msg: str, *args: object) -> None:
        LIBRDKAFKA_LOGGER.debug(msg, *args)


class BrokerErrors:
    """Client-level errors librdkafka reports through `error_cb` (not as messages).

    A broker that goes away mid-read never shows up in `consume()`, and a refused login
    (SASL) shows up in `list_topics` only as "Broker transport failure": librdkafka
    reports the cause ("... invalid credentials with SASL mechanism SCRAM-SHA-512",
    "Connection refused") only to this callback, served by `poll()`. An authentication
    error is kept over the "all brokers down" that follows it.
    """

    def __init__(self) -> None:
        self.last: str | None = None
        self.authentication: str | None = None

    def __call__(self, error: Any) -> None:
        from confluent_kafka import KafkaError

        self.last = str(error)
        if isinstance(error, KafkaError) and error.code() == KafkaError._AUTHENTICATION:
            self.authentication = error.str()

    def suffix(self) -> str:
        if self.authentication:
            return f"; authentication failed: {self.authentication}"
        return f"; last broker error: {self.last}" if self.last else ""


def bootstrap_addresses(bootstrap_servers: str) -> list[tuple[str, int]]:
    """`host:port,PLAINTEXT://host2:port2,[::1]:9092` -> [(host, port), ...]."""
    addresses = []
    for server in bootstrap_servers.split(","):
        server = server.strip().rpartition("://")[2]
        if not server:
            continue
        host, _, port = server.rpartition(":")
        addresses.append((host.strip("[]") or server, int(port) if port.isdigit() else 9092))
    return addresses


def probe_bootstrap(bootstrap_servers: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raise KafkaUnreachableError unless some bootstrap server accepts a TCP connection.

    Takes milliseconds when a broker is down locally (refused) and `timeout` at most
    per address otherwise, instead of librdkafka's silent retries until a metadata
    timeout.
    """
    failures = []
    for host, port in bootstrap_addresses(bootstrap_servers):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            failures.append(f"{host}:{port}: {exc.strerror or exc}")
    raise KafkaUnreachableError(
        bootstrap_servers, "cannot connect to any bootstrap server (" + "; ".join(failures) + ")"
    )


def consumer_conf(kafka_conf: Mapping[str, str], **overrides: Any) -> dict[str, Any]:
    """A consumer configuration for planning or reading: no group commits, no auto reset."""
    conf: dict[str, Any] = {
        "group.id": "tableflow",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        **BOUNDED_FETCH,
        "logger": DebugLogger(),
    }
    conf.update(kafka_conf)
    conf.update(overrides)
    if "fetch.max.bytes" not in kafka_conf and "fetch.max.bytes" not in overrides:
        # librdkafka refuses a fetch.max.bytes above receive.message.max.bytes - 512.
        receive = int(conf.get("receive.message.max.bytes", DEFAULT_RECEIVE_LIMIT))
        conf["fetch.max.bytes"] = str(min(int(BOUNDED_FETCH["fetch.max.bytes"]), receive - 512))
    return conf


def brokers_of(kafka_conf: Mapping[str, Any]) -> str:
    """The broker address(es) a configuration points at, for error messages."""
    return str(kafka_conf.get("bootstrap.servers") or kafka_conf.get("metadata.broker.list") or "?")


def topic_metadata(
    consumer: Any,
    topic: str,
    timeout: float,
    brokers: str = "?",
    what: str = "topic",
    errors: BrokerErrors | None = None,
) -> Any:
    """The broker's metadata of `topic` (confluent-kafka TopicMetadata), None when the
    answer does not list it; KafkaMetadataError naming `what` when no broker answers, with
    the cause librdkafka gave `errors` (the client's `error_cb`) if any."""
    from confluent_kafka import KafkaException

    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        cause = ""
        if errors is not None:
            consumer.poll(0.5)  # serves the error callback
            cause = errors.suffix()
        raise KafkaMetadataError(
            f"{what} {topic!r}: broker(s) {brokers} did not answer a metadata request within "
            f"{timeout:.0f}s: {exc}{cause}"
        ) from exc
    return metadata.topics.get(topic)


def _partitions(
    consumer: Any, topic: str, timeout: float, brokers: str, errors: BrokerErrors
) -> list[int]:
    topic_meta = topic_metadata(consumer, topic, timeout, brokers, errors=errors)
    if topic_meta is None or topic_meta.error is not None or not topic_meta.partitions:
        reason = topic_meta.error if topic_meta is not None else "not found"
        raise KafkaMetadataError(
            f"topic {topic!r} on broker(s) {brokers}: cannot read metadata ({reason})"
        )
    return sorted(topic_meta.partitions)


def topic_names(consumer_config: Mapping[str, str], timeout: float = 10.0) -> frozenset[str]:
    """The names of the topics on the cluster (internal `__*` topics left out)."""
    from confluent_kafka import Consumer, KafkaException

    consumer = Consumer(consumer_conf(consumer_config))
    try:
        metadata = consumer.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise KafkaMetadataError(
            f"broker(s) {brokers_of(consumer_config)} did not list their topics within "
            f"{timeout:.0f}s: {exc}"
        ) from exc
    finally:
        consumer.close()
    return frozenset(name for name in metadata.topics if not name.startswith("__"))


def get_watermarks(
    consumer_config: Mapping[str, str], topic: str, timeout: float = 10.0
) -> dict[int, tuple[int, int]]:
    """{partition: (log start offset, last stable offset)} of every partition of `topic`.

    The end is the *last stable offset* (`list_offsets`, READ_COMMITTED): the first
    offset of the oldest transaction still open, else the high watermark. tableflow reads
    `read_committed`, so a range ending there never waits for records an open transaction
    may still abort, and never reads half of one (docs/environment.md: with a transaction
    open at 13-14, the LSO is 13 and the high watermark 15)."""
    from confluent_kafka.admin import AdminClient

    errors = BrokerErrors()
    admin = AdminClient(admin_conf(consumer_config, error_cb=errors))
    return admin_watermarks(admin, topic, timeout, brokers_of(consumer_config), errors)


def admin_watermarks(
    admin: Any, topic: str, timeout: float, brokers: str, errors: BrokerErrors
) -> dict[int, tuple[int, int]]:
    """`get_watermarks` through an AdminClient the caller keeps (made with `admin_conf`
    and `errors` as its `error_cb`): a reader asking every second keeps one client."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    partitions = [
        TopicPartition(topic, p) for p in _partitions(admin, topic, timeout, brokers, errors)
    ]
    starts = _list_offsets(admin, partitions, OffsetSpec.earliest(), timeout, brokers)
    ends = _list_offsets(admin, partitions, OffsetSpec.latest(), timeout, brokers)
    return {
        tp.partition: (starts[(topic, tp.partition)], ends[(topic, tp.partition)])
        for tp in partitions
    }


def offsets_for_timestamp(
    consumer_config: Mapping[str, str], topic: str, timestamp_ms: int, timeout: float = 10.0
) -> dict[int, int]:
    """{partition: first offset with timestamp >= timestamp_ms}; -1 where there is none."""
    from confluent_kafka import Consumer, TopicPartition

    errors = BrokerErrors()
    consumer = Consumer(consumer_conf(consumer_config, error_cb=errors))
    try:
        brokers = brokers_of(consumer_config)
        wanted = [
            TopicPartition(topic, p, timestamp_ms)
            for p in _partitions(consumer, topic, timeout, brokers, errors)
        ]
        found = consumer.offsets_for_times(wanted, timeout=timeout)
        return {tp.partition: int(tp.offset) for tp in found}
    finally:
        consumer.close()


def admin_conf(kafka_conf: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    """An AdminClient's configuration: the connection settings of `kafka_conf` (security,
    bootstrap; a consumer's own settings left out), its log lines at DEBUG, `overrides`."""
    consumer_only = ("group.id", "isolation.level", "fetch.", "enable.auto", "auto.offset.reset")
    conf: dict[str, Any] = {k: v for k, v in kafka_conf.items() if not k.startswith(consumer_only)}
    conf.setdefault("logger", DebugLogger())
    return {**conf, **overrides}


@dataclass(frozen=True)
class TopicWatermarks:
    """What one read of many topics found: each topic's {partition: (low, high)}, and why
    a topic is not there (the broker does not have it)."""

    found: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def read_watermarks(
    consumer_config: Mapping[str, str], topics: Iterable[str], timeout: float = 10.0
) -> TopicWatermarks:
    """`get_watermarks` for many topics at once: three requests whatever their number (the
    topics' partitions, then the earliest and the latest offset of every partition), where
    a consumer per topic made two requests per partition (1,000 topics: 1.2 s of CPU).

    A topic the broker does not have is in `missing`; KafkaMetadataError when a broker
    does not answer or refuses a request."""
    from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    wanted = sorted(set(topics))
    if not wanted:
        return TopicWatermarks()
    brokers = brokers_of(consumer_config)
    errors = BrokerErrors()
    admin = AdminClient(admin_conf(consumer_config, error_cb=errors))
    partitions: dict[str, list[int]] = {}
    missing: dict[str, str] = {}
    described = admin.describe_topics(TopicCollection(wanted), request_timeout=timeout)
    for topic, future in described.items():
        try:
            description = future.result(timeout=timeout + 5)
        except (KafkaException, TimeoutError) as exc:
            error = exc.args[0] if exc.args else "no answer"
            if isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                missing[topic] = (
                    f"topic {topic!r} on broker(s) {brokers}: cannot read metadata (not found)"
                )
                continue
            admin.poll(0.5)  # serves the error callback (a refused login's cause)
            raise KafkaMetadataError(
                f"topic {topic!r}: broker(s) {brokers} did not answer a metadata request "
                f"within {timeout:.0f}s: {error}{errors.suffix()}"
            ) from exc
        found = sorted(p.id for p in description.partitions)
        if not found:
            missing[topic] = f"topic {topic!r} on broker(s) {brokers}: it has no partitions"
            continue
        partitions[topic] = found
    every = [TopicPartition(t, p) for t, ps in partitions.items() for p in ps]
    ends = {
        name: _list_offsets(admin, every, spec, timeout, brokers)
        for name, spec in (("low", OffsetSpec.earliest()), ("high", OffsetSpec.latest()))
    }
    return TopicWatermarks(
        found={
            topic: {p: (ends["low"][(topic, p)], ends["high"][(topic, p)]) for p in ps}
            for topic, ps in partitions.items()
        },
        missing=missing,
    )


def _list_offsets(
    admin: Any, partitions: list[Any], spec: Any, timeout: float, brokers: str
) -> dict[tuple[str, int], int]:
    """One ListOffsets request (per leader) for every partition: {(topic, partition): offset}.

    READ_COMMITTED: the latest offset is the *last stable offset* (see get_watermarks)."""
    from confluent_kafka import IsolationLevel, KafkaException

    if not partitions:
        return {}
    futures = admin.list_offsets(
        {tp: spec for tp in partitions},
        isolation_level=IsolationLevel.READ_COMMITTED,
        request_timeout=timeout,
    )
    offsets: dict[tuple[str, int], int] = {}
    for tp, future in futures.items():
        try:
            offsets[(tp.topic, tp.partition)] = int(future.result(timeout=timeout + 5).offset)
        except (KafkaException, TimeoutError) as exc:
            raise KafkaMetadataError(
                f"topic {tp.topic!r} partition {tp.partition} on broker(s) {brokers}: cannot "
                f"read watermarks: {exc}"
            ) from exc
    return offsets
