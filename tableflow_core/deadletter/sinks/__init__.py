"""Bad-record sinks, chosen by the table's policy and dead-letter target type.

    route_bad_records(bad, on_error, dlq, context) -> SinkResult

`fail` raises BadRecordsFailure naming the first offsets; `skip` counts; `dlq`
dispatches on the target's config model type (KafkaDeadLetter, IcebergDeadLetter).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tableflow_core.config.models.dead_letter import IcebergDeadLetter, KafkaDeadLetter
from tableflow_core.deadletter.errors import DeadLetterError
from tableflow_core.deadletter.frames import require_columns
from tableflow_core.deadletter.policy import Policy
from tableflow_core.deadletter.sinks.base import BadRecordSink, SinkContext, SinkResult
from tableflow_core.deadletter.sinks.fail import FailSink
from tableflow_core.deadletter.sinks.iceberg_table import IcebergTableSink
from tableflow_core.deadletter.sinks.kafka_topic import KafkaTopicSink
from tableflow_core.deadletter.sinks.skip import SkipSink
from tableflow_core.ingest.bad_records import BAD_RECORD_SCHEMA, DLQ_KEY_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

DEAD_LETTER_SINKS: dict[type, Callable[[Any, SinkContext], BadRecordSink]] = {
    KafkaDeadLetter: KafkaTopicSink,
    IcebergDeadLetter: IcebergTableSink,
}
POLICY_SINKS: dict[str, Callable[[SinkContext], BadRecordSink]] = {
    "fail": FailSink,
    "skip": SkipSink,
}

__all__ = [
    "DEAD_LETTER_SINKS",
    "BadRecordSink",
    "SinkContext",
    "SinkResult",
    "counts_by_outcome",
    "route_bad_records",
    "sink_for",
]


def sink_for(on_error: Policy, dlq: object | None, context: SinkContext) -> BadRecordSink:
    if on_error != "dlq":
        return POLICY_SINKS[on_error](context)
    factory = DEAD_LETTER_SINKS.get(type(dlq))
    if factory is None:
        raise DeadLetterError(
            f"table {context.table}: on_error is dlq but the dead-letter target is "
            f"{type(dlq).__name__ if dlq is not None else 'missing'}"
        )
    return factory(dlq, context)


def route_bad_records(
    bad: DataFrame, on_error: Policy, dlq: object | None, context: SinkContext
) -> SinkResult:
    """Route BAD_RECORD_SCHEMA rows by policy; counts per source partition for accounting.

    Rows are deduplicated on (source topic, partition, offset, stage) and persisted, so
    the caller's frame (which may read Kafka) is evaluated once.
    """
    require_columns(bad, BAD_RECORD_SCHEMA, "the bad records")
    sink = sink_for(on_error, dlq, context)
    unique = bad.select(*BAD_RECORD_SCHEMA.names).dropDuplicates(list(DLQ_KEY_COLUMNS)).persist()
    try:
        return sink.write(unique)
    finally:
        unique.unpersist()


def counts_by_outcome(results: Iterable[SinkResult]) -> dict[str, dict[int, int]]:
    """{"skipped": {partition: n}, "dead_lettered": {...}} summed over several routings,
    ready for `RunAccounting.from_counts(..., **counts_by_outcome(results))`."""
    totals: dict[str, dict[int, int]] = {"skipped": {}, "dead_lettered": {}}
    for result in results:
        bucket = totals[result.outcome]
        for partition, count in result.per_partition.items():
            bucket[partition] = bucket.get(partition, 0) + count
    return totals
