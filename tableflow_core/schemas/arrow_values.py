"""Arrow "storage" types: the cheap Python representation decoders produce before one cast.

Converting Python `datetime` objects into Arrow costs more than the Avro decode itself,
so decoders hand over temporal values as plain numbers (or text) and one vectorised
`RecordBatch.cast` turns them into the table's types:

- `TemporalAs.INT`: timestamps as int micros since the epoch (UTC), dates as int days.
- `TemporalAs.TEXT`: timestamps as RFC 3339 text (with offset), dates as ISO text,
  decimals as text (JSON formats, where values arrive as text anyway).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from tableflow_core.errors import TableflowError


class TemporalAs(enum.Enum):
    INT = "int"
    TEXT = "text"


class SchemaMappingError(TableflowError, ValueError):
    """A registry schema that has no faithful Arrow/Iceberg representation."""


def storage_type(target: pa.DataType, temporal: TemporalAs) -> pa.DataType:
    """The type decoders fill for a column of `target` type."""
    if pa.types.is_timestamp(target):
        return pa.int64() if temporal is TemporalAs.INT else pa.string()
    if pa.types.is_date32(target):
        return pa.int32() if temporal is TemporalAs.INT else pa.string()
    if pa.types.is_decimal(target) and temporal is TemporalAs.TEXT:
        return pa.string()
    if pa.types.is_struct(target):
        return pa.struct(
            [storage_field(target.field(i), temporal) for i in range(target.num_fields)]
        )
    if pa.types.is_map(target):
        return pa.map_(
            storage_field(target.key_field, temporal), storage_field(target.item_field, temporal)
        )
    if pa.types.is_list(target) or pa.types.is_large_list(target):
        return pa.list_(storage_field(target.value_field, temporal))
    return target


def storage_field(field: pa.Field, temporal: TemporalAs) -> pa.Field:
    return field.with_type(storage_type(field.type, temporal))


def storage_schema(target: pa.Schema, temporal_by_column: Mapping[str, TemporalAs]) -> pa.Schema:
    """Storage schema of `target`; columns not in the mapping use `TemporalAs.INT`."""
    return pa.schema(
        [storage_field(f, temporal_by_column.get(f.name, TemporalAs.INT)) for f in target],
        metadata=target.metadata,
    )


def build_batch(
    rows: Sequence[Mapping[str, Any]], storage: pa.Schema, target: pa.Schema
) -> pa.RecordBatch:
    """Rows (dicts keyed by column name; missing keys are null) -> a batch of `target`.

    Raises pyarrow/Python errors when a value does not fit; callers isolate the row.
    """
    batch = pa.RecordBatch.from_pylist(list(rows), schema=storage)
    if storage.equals(target):
        return batch
    return batch.cast(target)
