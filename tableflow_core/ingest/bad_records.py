"""The shape of a bad record, shared by every stage that can reject one.

A record that cannot land as declared (undecodable, does not fit the table, fails a
transform or a row-level check) travels as data in this shape: the original bytes, where
it came from, and why it was rejected. The dead-letter sinks (Kafka topic, Iceberg table)
and the run's accounting read it; nothing about a bad record travels as exception text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import pyarrow as pa

from tableflow_core.ingest.upkeep import UPKEEP_TABLE_PROPERTIES

BadRecordStage = Literal["decode", "transform", "check"]
BAD_RECORD_STAGES: tuple[BadRecordStage, ...] = ("decode", "transform", "check")

HEADER_TYPE = pa.list_(
    pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
)

# Column order is part of the contract: the Iceberg DLQ table is created from it.
BAD_RECORD_SCHEMA = pa.schema(
    [
        pa.field("source_topic", pa.string(), nullable=False),
        pa.field("source_partition", pa.int32(), nullable=False),
        pa.field("source_offset", pa.int64(), nullable=False),
        pa.field("source_timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADER_TYPE),
        pa.field("stage", pa.string(), nullable=False),
        pa.field("error_class", pa.string(), nullable=False),
        pa.field("error_message", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("failed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)

# Rows rejected after decoding (by a transform or a row-level check) carry only where they
# came from and why; the dead-letter stage fetches their original bytes from Kafka by
# (partition, offset) and turns them into BAD_RECORD_SCHEMA rows.
REJECTED_ROW_SCHEMA = pa.schema(
    [
        pa.field("source_partition", pa.int32(), nullable=False),
        pa.field("source_offset", pa.int64(), nullable=False),
        pa.field("stage", pa.string(), nullable=False),
        pa.field("error_class", pa.string(), nullable=False),
        pa.field("error_message", pa.string(), nullable=False),
    ]
)

# A dead-letter target declared `payload: masked` (the default for a table with masks)
# keeps no key or value bytes: a row that decoded carries its row as JSON, with the
# table's masks applied, in `value`, and every row carries this header (replay refuses it).
PAYLOAD_HEADER = "tableflow.error.payload"
MASKED_PAYLOAD = b"masked-json"
# The optional column of rejected rows holding that JSON (the table's columns after the
# transforms: masked columns masked).
ROW_JSON_COLUMN = "row_json"

# Hidden columns every decoded batch carries through transforms and checks (ordering for
# dedup and upsert, and the way back to the source record); the write stage drops them.
SOURCE_PARTITION_COLUMN = "__tf_partition"
SOURCE_OFFSET_COLUMN = "__tf_offset"
# How a check's sample rows name those positions (run_results.json, errors).
SAMPLE_POSITIONS = {
    SOURCE_PARTITION_COLUMN: "kafka_partition",
    SOURCE_OFFSET_COLUMN: "kafka_offset",
}

# The Iceberg dead-letter table: the bad records' columns, marked with the tables writing to
# it; idempotent writes match on the key columns (deadletter/sinks/iceberg_table.py).
DLQ_MARKER_PROPERTY = "tableflow.dead-letter"  # value: comma-separated source table names
DLQ_KEY_COLUMNS: tuple[str, ...] = ("source_topic", "source_partition", "source_offset", "stage")


def dlq_table_schema() -> pa.Schema:
    """The desired schema of every Iceberg dead-letter table."""
    return BAD_RECORD_SCHEMA


def dlq_properties(source_tables: Iterable[str]) -> dict[str, str]:
    return {
        "format-version": "2",
        DLQ_MARKER_PROPERTY: ",".join(sorted(set(source_tables))),
        "write.merge.mode": "merge-on-read",
        **UPKEEP_TABLE_PROPERTIES,  # a commit per run that dead-letters
    }
