"""Hidden columns the pipeline carries between stages (never written to the table)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from tableflow_core.ingest.bad_records import (
    BAD_RECORD_SCHEMA,
    SOURCE_OFFSET_COLUMN,
    SOURCE_PARTITION_COLUMN,
)

# True on the row of a tombstone (a null value). Upsert: the key row the write stage
# deletes by. Append: a row of NULLs the decode stage counts and drops (nothing to delete).
TOMBSTONE_COLUMN = "__tf_tombstone"
# Upsert tables: the record's Kafka timestamp (epoch ms; null when it has none), first of
# the order of a key's records (timestamp, partition, offset): docs/architecture.md.
SOURCE_TIMESTAMP_COLUMN = "__tf_timestamp"
# Upsert tables: true on the row of a record a `filter` took out, going on to the write
# as the delete of its key when it is the key's latest record (counted as `filtered`).
RETRACTION_COLUMN = "__tf_retraction"
# Set on a record that could not be decoded (BAD_RECORD_SCHEMA), null on a good row.
BAD_RECORD_COLUMN = "__tf_bad"
# Append tables whose dedup runs in the read tasks (pipeline/transforms/arrow_dedup.py): true on a
# good row a row of the same key in the same task supersedes (dropped after decode).
DUPLICATE_COLUMN = "__tf_duplicate"

HIDDEN_PREFIX = "__tf_"

# Inside the decode output the struct's fields are nullable: a good row's struct is null.
BAD_RECORD_STRUCT = pa.struct([f.with_nullable(True) for f in BAD_RECORD_SCHEMA])


def source_fields(upsert: bool = False) -> list[pa.Field]:
    """The hidden columns every decoded row carries, after the table's columns (upsert
    tables: the record's timestamp too)."""
    fields = [
        pa.field(SOURCE_PARTITION_COLUMN, pa.int32(), nullable=False),
        pa.field(SOURCE_OFFSET_COLUMN, pa.int64(), nullable=False),
        pa.field(TOMBSTONE_COLUMN, pa.bool_(), nullable=False),
    ]
    if upsert:
        fields.append(pa.field(SOURCE_TIMESTAMP_COLUMN, pa.int64()))
    return fields


def decoded_schema(table_schema: pa.Schema, upsert: bool = False) -> pa.Schema:
    """The decode stage's output: table columns, source position and tombstone flag, the
    bad-record struct."""
    # Every table column is nullable here: a bad record's row holds only its position.
    return pa.schema(
        [
            *(f.with_nullable(True) for f in table_schema),
            *source_fields(upsert),
            pa.field(BAD_RECORD_COLUMN, BAD_RECORD_STRUCT),
        ]
    )


def good_row_mask(batch: pa.RecordBatch | pa.Table) -> pa.Array | pa.ChunkedArray:
    """True on the rows of a decoded batch that go on to the table's columns: neither a
    bad record nor a tombstone."""
    return pc.and_(
        pc.is_null(batch.column(BAD_RECORD_COLUMN)), pc.invert(batch.column(TOMBSTONE_COLUMN))
    )


def is_hidden(name: str) -> bool:
    return name.startswith(HIDDEN_PREFIX)
