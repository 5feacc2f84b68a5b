"""Fetching the original Kafka records of rows rejected after decoding.

A transform or a row-level check rejects a *decoded* row; the dead-letter targets want
the record as it was on the topic. `fetch_originals` re-reads key, value, headers and
timestamp by (partition, offset) inside Spark tasks (confluent-kafka assign + seek,
read_committed, via `read_range`), never through the driver. Rows are repartitioned
by source partition so each task seeks a partition once per span of nearby offsets.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tableflow_core.config.models.dead_letter import DeadLetterPayload
from tableflow_core.deadletter.errors import OriginalRecordMissingError
from tableflow_core.deadletter.frames import require_columns, spark_schema
from tableflow_core.ingest.bad_records import (
    BAD_RECORD_SCHEMA,
    MASKED_PAYLOAD,
    PAYLOAD_HEADER,
    REJECTED_ROW_SCHEMA,
    ROW_JSON_COLUMN,
)
from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.kafka.range_reader import read_range

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Wanted offsets closer than this are read as one range (cheaper than another seek).
DEFAULT_MAX_GAP = 10_000
OUTPUT_BATCH_ROWS = 1_000

RangeReader = Callable[[Mapping[str, str], OffsetRange], Iterator[Sequence[KafkaMessage]]]


def offset_spans(offsets: Sequence[int], max_gap: int) -> list[tuple[int, int]]:
    """Sorted offsets -> [first, last + 1) spans, split where the gap exceeds `max_gap`."""
    spans: list[tuple[int, int]] = []
    for offset in sorted(set(offsets)):
        if spans and offset - spans[-1][1] < max_gap:
            spans[-1] = (spans[-1][0], offset + 1)
        else:
            spans.append((offset, offset + 1))
    return spans


def _timestamp_us(message: KafkaMessage) -> int | None:
    return None if message.timestamp_ms is None else message.timestamp_ms * 1000


def bad_record_row(
    message: KafkaMessage,
    rejected: Mapping[str, Any],
    run_id: str,
    failed_at_us: int,
    payload: DeadLetterPayload = "raw",
) -> dict[str, Any]:
    """The BAD_RECORD_SCHEMA row of a rejected row and its original record. `payload`
    `masked`: no key or value bytes; `value` holds the rejected row as JSON (its
    `row_json`, masked columns masked) and a header says so."""
    headers = [{"key": k, "value": v} for k, v in message.headers]
    key, value = message.key, message.value
    if payload == "masked":
        row = rejected.get(ROW_JSON_COLUMN)
        key, value = None, row.encode() if row is not None else None
        headers.append({"key": PAYLOAD_HEADER, "value": MASKED_PAYLOAD})
    return {
        "source_topic": message.topic,
        "source_partition": message.partition,
        "source_offset": message.offset,
        "source_timestamp": _timestamp_us(message),
        "key": key,
        "value": value,
        "headers": headers,
        "stage": rejected["stage"],
        "error_class": rejected["error_class"],
        "error_message": rejected["error_message"],
        "run_id": run_id,
        "failed_at": failed_at_us,
    }


def originals_for_rows(
    kafka_conf: Mapping[str, str],
    topic: str,
    rejected_rows: Sequence[Mapping[str, Any]],
    run_id: str,
    failed_at_us: int,
    *,
    max_gap: int = DEFAULT_MAX_GAP,
    reader: RangeReader | None = None,
    payload: DeadLetterPayload = "raw",
) -> Iterator[list[dict[str, Any]]]:
    """BAD_RECORD_SCHEMA rows (in lists) for `rejected_rows`, read back from Kafka."""
    if reader is None:
        reader = read_range
    by_partition: dict[int, dict[int, list[Mapping[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for row in rejected_rows:
        by_partition[int(row["source_partition"])][int(row["source_offset"])].append(row)
    for partition in sorted(by_partition):
        wanted = by_partition[partition]
        for start, end in offset_spans(list(wanted), max_gap):
            found: set[int] = set()
            out: list[dict[str, Any]] = []
            for chunk in reader(kafka_conf, OffsetRange(topic, partition, start, end)):
                for message in chunk:
                    for rejected in wanted.get(message.offset, ()):
                        out.append(bad_record_row(message, rejected, run_id, failed_at_us, payload))
                        found.add(message.offset)
                if len(out) >= OUTPUT_BATCH_ROWS:
                    yield out
                    out = []
            if out:
                yield out
            missing = sorted(o for o in wanted if start <= o < end and o not in found)
            if missing:
                raise OriginalRecordMissingError(
                    f"topic {topic!r} partition {partition}: the original record(s) at offset(s) "
                    f"{missing[:20]} are no longer on the broker (deleted by retention or "
                    "compaction?); they cannot be dead-lettered with their bytes"
                )


def _fetch_task(
    kafka_conf: dict[str, str],
    topic: str,
    run_id: str,
    failed_at_us: int,
    max_gap: int,
    payload: DeadLetterPayload,
) -> Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]:
    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = [row for batch in batches for row in batch.to_pylist()]
        for out in originals_for_rows(
            kafka_conf, topic, rows, run_id, failed_at_us, max_gap=max_gap, payload=payload
        ):
            yield pa.RecordBatch.from_pylist(out, schema=BAD_RECORD_SCHEMA)

    return run


def fetch_originals(
    spark: SparkSession,
    rejected: DataFrame,
    topic: str,
    kafka_conf: Mapping[str, str],
    run_id: str,
    *,
    failed_at: datetime | None = None,
    max_gap: int = DEFAULT_MAX_GAP,
    payload: DeadLetterPayload = "raw",
) -> DataFrame:
    """A DataFrame in BAD_RECORD_SCHEMA: each rejected row with its original record.

    `rejected` has the REJECTED_ROW_SCHEMA columns (others are ignored; with `payload`
    `masked`, its `row_json` column, when it has one, becomes the row's value). The
    result is lazy: the caller should persist it if it is used more than once.
    """
    del spark  # the session is the rejected frame's; kept for a uniform signature
    require_columns(rejected, REJECTED_ROW_SCHEMA, "the rejected rows")
    moment = failed_at or datetime.now(UTC)
    failed_at_us = int(moment.timestamp() * 1_000_000)
    mapper = _fetch_task(dict(kafka_conf), topic, run_id, failed_at_us, max_gap, payload)
    columns = list(REJECTED_ROW_SCHEMA.names)
    if payload == "masked" and ROW_JSON_COLUMN in rejected.columns:
        columns.append(ROW_JSON_COLUMN)
    return (
        rejected.select(*columns)
        .repartition("source_partition")
        .mapInArrow(mapper, spark_schema(BAD_RECORD_SCHEMA))
    )


def without_payload(bad: DataFrame) -> DataFrame:
    """BAD_RECORD_SCHEMA rows without their key and value bytes, marked with the
    `masked` payload header (the dead-letter payload `masked` of undecodable records)."""
    from pyspark.sql import functions as F

    marker = F.struct(
        F.lit(PAYLOAD_HEADER).alias("key"), F.lit(MASKED_PAYLOAD).cast("binary").alias("value")
    )
    headers = F.when(F.col("headers").isNull(), F.array(marker)).otherwise(
        F.concat(F.col("headers"), F.array(marker))
    )
    return bad.withColumns(
        {
            "key": F.lit(None).cast("binary"),
            "value": F.lit(None).cast("binary"),
            "headers": headers,
        }
    ).select(*BAD_RECORD_SCHEMA.names)
