"""A table's rows as Iceberg data files, written where they are (inside a Spark task).

A shared job's read tasks write each small table's rows themselves (ingest/sharing.py):
Parquet files in the table's data location, with Iceberg's field ids, column metrics and
the table's write properties (format, compression, target file size), by pyiceberg's
writer: what `Table.append` does before its commit. The files are named after a fresh
uuid; nothing refers to them until the table's publish commit adds them.

The Iceberg metadata a task needs is the table's schema, partition spec, properties and
location: `slim_metadata` drops the snapshot history (a table refreshed every minute has
thousands of snapshots), so shipping it to the tasks stays small.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa


def slim_metadata(metadata: Any) -> Any:
    """`metadata` (pyiceberg TableMetadata) without snapshots, refs and logs."""
    return metadata.model_copy(
        update={"snapshots": [], "snapshot_log": [], "metadata_log": [], "refs": {}}
    )


def file_io_properties(properties: Mapping[str, Any]) -> dict[str, str]:
    """A table's FileIO properties that can travel to a task (strings: the storage's
    endpoint, region and credentials; not the catalog client's objects)."""
    return {k: v for k, v in properties.items() if isinstance(v, str)}


def write_data_files(metadata: Any, io_properties: Mapping[str, str], rows: pa.Table) -> list[Any]:
    """Write `rows` (the table's columns) as data files of the table; their DataFiles.

    Raises ValueError (pyiceberg's message) when the rows' types do not fit the table's
    columns: such rows are never written."""
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible, _dataframe_to_data_files

    if rows.num_rows == 0:
        return []
    _check_pyarrow_schema_compatible(
        metadata.schema(), rows.schema, format_version=metadata.format_version
    )
    io = load_file_io(dict(io_properties), location=metadata.location)
    return list(_dataframe_to_data_files(metadata, rows, io, write_uuid=uuid.uuid4()))
