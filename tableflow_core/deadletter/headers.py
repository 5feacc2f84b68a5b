"""Error headers added to records produced to a Kafka dead-letter topic (pure).

The original record's headers come first, unchanged; tableflow's headers follow, all
UTF-8 text. A consumer deduplicates by (source topic, partition, offset, stage).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

HEADER_PREFIX = "tableflow.error."
STAGE = HEADER_PREFIX + "stage"
ERROR_CLASS = HEADER_PREFIX + "class"
ERROR_MESSAGE = HEADER_PREFIX + "message"
SOURCE_TOPIC = HEADER_PREFIX + "source.topic"
SOURCE_PARTITION = HEADER_PREFIX + "source.partition"
SOURCE_OFFSET = HEADER_PREFIX + "source.offset"
SOURCE_TIMESTAMP = HEADER_PREFIX + "source.timestamp"  # epoch milliseconds, if the record had one
RUN_ID = HEADER_PREFIX + "run.id"
FAILED_AT = HEADER_PREFIX + "failed.at"  # ISO-8601, UTC

# The identity of a dead-lettered record: a re-run re-sends the same values.
DEDUP_HEADERS: tuple[str, ...] = (SOURCE_TOPIC, SOURCE_PARTITION, SOURCE_OFFSET, STAGE)

Header = tuple[str, str | bytes | None]


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def error_headers(row: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """tableflow's headers for one BAD_RECORD_SCHEMA row (a dict from Arrow's to_pylist)."""
    values: list[tuple[str, Any]] = [
        (STAGE, row["stage"]),
        (ERROR_CLASS, row["error_class"]),
        (ERROR_MESSAGE, row["error_message"]),
        (SOURCE_TOPIC, row["source_topic"]),
        (SOURCE_PARTITION, row["source_partition"]),
        (SOURCE_OFFSET, row["source_offset"]),
    ]
    if row.get("source_timestamp") is not None:
        values.append((SOURCE_TIMESTAMP, _millis(row["source_timestamp"])))
    values.append((RUN_ID, row["run_id"]))
    values.append((FAILED_AT, row["failed_at"].isoformat()))
    return [(name, str(value).encode()) for name, value in values]


def dead_letter_headers(row: Mapping[str, Any]) -> list[Header]:
    """The original headers (in order) followed by tableflow's error headers."""
    original: Sequence[Mapping[str, Any]] = row.get("headers") or ()
    return [(h["key"], h["value"]) for h in original] + list(error_headers(row))


def decode_error_headers(headers: Sequence[Header]) -> dict[str, str]:
    """{name: text} of the tableflow headers of a consumed record (last occurrence wins)."""
    return {
        name: value if isinstance(value, str) else value.decode()
        for name, value in headers
        if name.startswith(HEADER_PREFIX) and value is not None
    }
