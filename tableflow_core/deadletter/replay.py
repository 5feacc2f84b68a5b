"""Replaying dead-lettered records to a topic once their cause is fixed.

Rows come from the Iceberg dead-letter table (e.g. a pyiceberg scan's `to_pylist()`),
in BAD_RECORD_SCHEMA. Each is produced with its original key, value and headers plus
`tableflow.replayed.from` = "topic/partition/offset", so a replay can be traced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tableflow_core.deadletter.errors import DeadLetterDeliveryError, DeadLetterError
from tableflow_core.deadletter.sinks.kafka_topic import producer_conf
from tableflow_core.ingest.bad_records import PAYLOAD_HEADER
from tableflow_core.kafka.admin import brokers_of

REPLAYED_FROM = "tableflow.replayed.from"


def replay_records(
    kafka_conf: Mapping[str, str],
    topic: str,
    rows: Iterable[Mapping[str, Any]],
    timeout_s: float = 60.0,
) -> int:
    """Produce `rows` to `topic`; the number produced, once every one is acknowledged."""
    from confluent_kafka import Producer

    producer = Producer(producer_conf(kafka_conf))
    errors: list[str] = []
    count = 0

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(str(error))

    rows = list(rows)
    for row in rows:  # before producing anything
        if any(h["key"] == PAYLOAD_HEADER for h in row.get("headers") or ()):
            raise DeadLetterError(
                f"dead-lettered record {_origin(row)} kept no payload (its table's "
                "dead-letter target has payload masked): it cannot be replayed from there; "
                "read it from the topic by partition and offset while retention keeps it"
            )
    for row in rows:
        origin = _origin(row)
        headers: list[tuple[str, str | bytes | None]] = [
            (h["key"], h["value"]) for h in row.get("headers") or ()
        ]
        headers.append((REPLAYED_FROM, origin.encode()))
        while True:
            try:
                producer.produce(
                    topic, row["value"], row["key"], headers=headers, on_delivery=delivered
                )
                break
            except BufferError:
                producer.poll(0.5)
        count += 1
    remaining = producer.flush(timeout_s)
    if errors or remaining:
        raise DeadLetterDeliveryError(
            f"replay to topic {topic!r} on broker(s) {brokers_of(kafka_conf)}: "
            f"{len(errors)} delivery error(s), {remaining} unacknowledged: "
            f"{errors[0] if errors else ''}"
        )
    return count


def _origin(row: Mapping[str, Any]) -> str:
    return f"{row['source_topic']}/{row['source_partition']}/{row['source_offset']}"
