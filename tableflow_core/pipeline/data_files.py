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
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
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


# (format version, Iceberg schema, Arrow schema) pyiceberg found compatible in this
# process: its check costs ~50 ms, as much as writing a small table's file, and a shared
# job's tables often have the same schemas.
_COMPATIBLE: set[tuple[int, str, pa.Schema]] = set()
_COMPATIBLE_LIMIT = 1024


def write_data_files(
    metadata: Any, io_properties: Mapping[str, str], rows: pa.Table, in_order: bool = False
) -> list[Any]:
    """Write `rows` (the table's columns) as data files of the table; their DataFiles.
    `in_order`: the files hold the rows in their order, the first file the first rows
    (pyiceberg's streaming writer; its table writer packs batches into files by size, in
    any order).

    Raises ValueError (pyiceberg's message) when the rows' types do not fit the table's
    columns: such rows are never written."""
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible, _dataframe_to_data_files
    from pyiceberg.table import TableProperties
    from pyiceberg.utils.properties import property_as_int

    if rows.num_rows == 0:
        return []
    schema = metadata.schema()
    checked = (metadata.format_version, schema.model_dump_json(), rows.schema)
    if checked not in _COMPATIBLE:
        _check_pyarrow_schema_compatible(
            schema, rows.schema, format_version=metadata.format_version
        )
        if len(_COMPATIBLE) >= _COMPATIBLE_LIMIT:
            _COMPATIBLE.clear()
        _COMPATIBLE.add(checked)
    io = load_file_io(dict(io_properties), location=metadata.location)
    data: pa.Table | pa.RecordBatchReader = rows
    if in_order:  # batches of about a file's rows, a file closed at each target size
        target = property_as_int(
            metadata.properties,
            TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
            TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
        )
        per_file = max(1, int((target or 1) * rows.num_rows / max(1, rows.nbytes)))
        batches = rows.to_batches(max_chunksize=per_file)
        data = pa.RecordBatchReader.from_batches(rows.schema, batches)
    return list(_dataframe_to_data_files(metadata, data, io, write_uuid=uuid.uuid4()))


def columns_by_field_id(schema: pa.Schema) -> dict[int, str]:
    """A data file's column names by their Iceberg field id (`PARQUET:field_id`; a
    renamed column keeps its id)."""
    return {
        int(f.metadata[b"PARQUET:field_id"]): f.name
        for f in schema
        if f.metadata and b"PARQUET:field_id" in f.metadata
    }


class PositionDeletes:
    """The rows of a scan task's data file its position delete files removed, each delete
    file read once (one may name many data files). `unsupported(reason)`: the error an
    equality delete file raises (the caller's way of saying it cannot read such a table)."""

    def __init__(self, io: Any, unsupported: Callable[[str], Exception]) -> None:
        self._io = io
        self._unsupported = unsupported
        self._read: dict[str, dict[str, pa.ChunkedArray]] = {}

    def of(self, task: Any) -> np.ndarray:
        from pyiceberg.io.pyarrow import _read_deletes
        from pyiceberg.manifest import DataFileContent

        found = []
        for delete_file in task.delete_files:
            if delete_file.content != DataFileContent.POSITION_DELETES:
                raise self._unsupported(f"equality delete file {delete_file.file_path}")
            by_file = self._read.get(delete_file.file_path)
            if by_file is None:
                by_file = _read_deletes(self._io, delete_file)
                self._read[delete_file.file_path] = by_file
            positions = by_file.get(task.file.file_path)
            if positions is not None:
                found.append(positions.to_numpy())
        return np.concatenate(found) if found else np.empty(0, dtype=np.int64)
