"""Keeping the committed offsets through maintenance.

Rewrite snapshots (compaction, delete and manifest rewrites) carry no custom
summary properties: readers walk the ancestry past them to the last ingest
commit. Snapshot expiry can remove that commit, so before expiring the current
offsets are copied into the table property `tableflow.offsets`, the readers'
fallback (`state/offsets.py`). If offsets ever went missing after an operation,
the ones read before it are written back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tableflow_core.maintenance.target import SparkTable
from tableflow_core.state.offsets import OFFSETS_KEY, CommittedOffsets, encode_offsets
from tableflow_core.state.table_state import read_table_state

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def committed(spark: SparkSession, table: SparkTable) -> CommittedOffsets | None:
    return read_table_state(spark, table.sql).committed_offsets()


def set_offsets_property(spark: SparkSession, table: SparkTable, found: CommittedOffsets) -> None:
    value = encode_offsets(found.topic, found.offsets).replace("'", "\\'")
    spark.sql(f"ALTER TABLE {table.sql} SET TBLPROPERTIES ('{OFFSETS_KEY}' = '{value}')")


def preserve_offsets(spark: SparkSession, table: SparkTable) -> CommittedOffsets | None:
    """Copy the committed offsets into the fallback property; returns them (None: none yet)."""
    found = committed(spark, table)
    if found is not None and found.source == "snapshot":
        set_offsets_property(spark, table, found)
    return found
