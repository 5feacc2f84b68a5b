"""Upsert tables: one answer per key, whatever the run boundaries (docs/architecture.md).

A key's records are ordered by their Kafka timestamp, then partition, then offset (a
record without a timestamp comes before any with one). A key ends on its latest record
by that order: a row when it has a value, no row when it is a tombstone or a record a
`filter` took out. The latest of a run's batch is compared with what the table already
holds for the key:

- the row's own position: every upsert table keeps the Kafka position of the record its
  row comes from in `POSITION_COLUMNS` (a row written before the table had them is
  older than any record);
- the position of the key's latest delete: a delete leaves no row, so the table's
  deletes table (`deletes_table`: the key columns and the position; a run appends a row
  per key it deleted, the latest per key counts) remembers it; a later run's older
  record of that key is dropped, not re-inserted.

So applying the same records in one run or in many, split anywhere, gives the same table.
"""

from __future__ import annotations

import pyarrow as pa

from tableflow_core.schemas.formats import UTC_MICROS, metadata_column_name

TIMESTAMP_COLUMN = metadata_column_name("timestamp")
PARTITION_COLUMN = metadata_column_name("partition")
OFFSET_COLUMN = metadata_column_name("offset")
# The Kafka position of the record each row comes from (metadata columns of these names,
# added to every upsert table that does not declare them), in the order they compare.
POSITION_COLUMNS: dict[str, pa.DataType] = {
    TIMESTAMP_COLUMN: UTC_MICROS,
    PARTITION_COLUMN: pa.int32(),
    OFFSET_COLUMN: pa.int64(),
}
# A change stream's mirror (`value.envelope: debezium`, docs/cdc.md) orders a key's
# changes by the source's position first: the LSN of the last transaction committed
# before the change's (Debezium's `source.sequence[0]`), then the change's own LSN; two
# changes of which either has no source position (a tombstone, another connector) are
# ordered by the Kafka position alone. The columns are the rows' metadata columns.
CDC_LAST_COMMIT_COLUMN = metadata_column_name("cdc_last_commit_lsn")
CDC_LSN_COLUMN = metadata_column_name("cdc_lsn")
CDC_POSITION_COLUMNS: dict[str, pa.DataType] = {
    CDC_LAST_COMMIT_COLUMN: pa.int64(),
    CDC_LSN_COLUMN: pa.int64(),
}


def order_columns(cdc: bool) -> dict[str, pa.DataType]:
    """The columns a key's records are ordered by, in the order they compare."""
    return {**CDC_POSITION_COLUMNS, **POSITION_COLUMNS} if cdc else dict(POSITION_COLUMNS)


# The table beside an upsert table that remembers the position of each key's latest
# delete (same namespace): `<table>__tableflow_deletes`.
DELETES_SUFFIX = "__tableflow_deletes"
# Properties of a deletes table: merge-on-read like its upsert table; old metadata files
# go as new ones come (it gets a commit per run that deletes).
DELETES_TABLE_PROPERTIES = {
    "format-version": "2",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
}


def deletes_table(identifier: str) -> str:
    """The deletes table of upsert table `identifier` (`ns.table` or a Spark identifier
    whose last part is quoted with backticks)."""
    if identifier.endswith("`"):
        return f"{identifier[:-1]}{DELETES_SUFFIX}`"
    return f"{identifier}{DELETES_SUFFIX}"
