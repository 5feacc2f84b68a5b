"""Dead-lettering to a Kafka topic, produced from inside Spark tasks.

Each record keeps its original key, value and headers; tableflow's error headers are
appended (deadletter/headers.py). Each task flushes its producer and fails if any
record was not acknowledged, so a task that ends cleanly has delivered everything.

Delivery guarantee: at least once. A crash after this produce and before the table's
commit, or a retried Spark task, sends the same records again on the re-run. Consumers
deduplicate by the headers (source topic, partition, offset, stage).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tableflow_core.config.models.dead_letter import KafkaDeadLetter
from tableflow_core.deadletter.errors import DeadLetterDeliveryError
from tableflow_core.deadletter.headers import dead_letter_headers
from tableflow_core.deadletter.sinks.base import SinkContext, SinkResult
from tableflow_core.kafka.admin import brokers_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

COUNTS_SCHEMA = pa.schema(
    [pa.field("source_partition", pa.int32(), False), pa.field("records", pa.int64(), False)]
)
FLUSH_TIMEOUT_S = 60.0
# Consumer-only settings a target's `config` may carry; a producer would warn on each.
_CONSUMER_ONLY = ("group.id", "isolation.level", "fetch.", "enable.auto", "auto.offset.reset")


def producer_conf(kafka_conf: Mapping[str, str]) -> dict[str, Any]:
    conf: dict[str, Any] = {k: v for k, v in kafka_conf.items() if not k.startswith(_CONSUMER_ONLY)}
    conf.update({"enable.idempotence": True, "acks": "all", "linger.ms": 20})
    return conf


class _Deliveries:
    def __init__(self) -> None:
        self.errors: list[str] = []
        self.acked = 0

    def __call__(self, error: Any, message: Any) -> None:
        if error is not None:
            self.errors.append(str(error))
        else:
            self.acked += 1


def produce_rows(
    kafka_conf: Mapping[str, str], topic: str, batches: Iterable[pa.RecordBatch]
) -> Counter[int]:
    """Produce every BAD_RECORD_SCHEMA row; {source partition: records} once all are acked."""
    from confluent_kafka import KafkaException, Producer

    brokers = brokers_of(kafka_conf)
    producer = Producer(producer_conf(kafka_conf))
    deliveries = _Deliveries()
    counts: Counter[int] = Counter()
    where = ""
    for batch in batches:
        for row in batch.to_pylist():
            where = (
                f"record from topic {row['source_topic']!r} partition "
                f"{row['source_partition']} offset {row['source_offset']}"
            )
            while True:
                try:
                    producer.produce(
                        topic,
                        value=row["value"],
                        key=row["key"],
                        headers=dead_letter_headers(row),
                        on_delivery=deliveries,
                    )
                    break
                except BufferError:
                    producer.poll(0.5)  # local queue full: let deliveries drain
                except KafkaException as exc:
                    raise DeadLetterDeliveryError(
                        f"dead-letter topic {topic!r} on broker(s) {brokers}: cannot produce the "
                        f"{where}: {exc}"
                    ) from exc
            counts[int(row["source_partition"])] += 1
            producer.poll(0)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if deliveries.errors or remaining:
        problem = deliveries.errors[0] if deliveries.errors else f"{remaining} still unacknowledged"
        raise DeadLetterDeliveryError(
            f"dead-letter topic {topic!r} on broker(s) {brokers}: {len(deliveries.errors)} "
            f"delivery error(s), {remaining} unacknowledged after {FLUSH_TIMEOUT_S:.0f}s "
            f"(last record: {where}): {problem}"
        )
    return counts


def _produce_task(
    kafka_conf: dict[str, str], topic: str
) -> Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]:
    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        counts = produce_rows(kafka_conf, topic, batches)
        yield pa.RecordBatch.from_pylist(
            [{"source_partition": p, "records": n} for p, n in sorted(counts.items())],
            schema=COUNTS_SCHEMA,
        )

    return run


@dataclass(frozen=True)
class KafkaTopicSink:
    target: KafkaDeadLetter
    context: SinkContext

    def write(self, bad: DataFrame) -> SinkResult:
        from tableflow_core.deadletter.frames import spark_schema

        mapper = _produce_task(dict(self.context.kafka_conf), self.target.topic)
        rows = bad.mapInArrow(mapper, spark_schema(COUNTS_SCHEMA)).collect()
        per_partition: Counter[int] = Counter()
        for row in rows:
            per_partition[int(row["source_partition"])] += int(row["records"])
        return SinkResult(
            "dead_lettered", f"kafka topic {self.target.topic}", dict(sorted(per_partition.items()))
        )
