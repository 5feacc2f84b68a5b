"""An append table's `dedup` against the table, by the table's key set instead of a scan.

Insert-if-absent asks one question of the table per batch row: does it hold the row's
dedup key? The anti-join (`pipeline/transforms/spark.dedup_against_table`) answers it by
reading every row's key column each batch. Here the driver keeps the table's keys as a
membership set (`key_index.KeySet`: the key itself for one integer column, else a
128-bit hash; 8 or 16 bytes a key) and looks up only the batch's keys:

- **at the run's base snapshot only.** A set is at one snapshot. At a batch it moves to
  the run's base snapshot along main's history when every snapshot in between only
  appended data files (operation `append`, no delete file, no data file removed: the
  keys of the files each added are read, the batch's own files among them, so a
  batch's cost follows what was written since the last one) or only rewrote them
  (`replace`: compaction keeps the rows); anything else (a delete, an overwrite, a
  rollback: the set's snapshot not on the way) builds it again from the table, as does a
  new process (`tableflow apply`; a restart of `tableflow run`). Built from every data
  file's key columns at that snapshot, rows its position delete files removed left out;
- **None (the anti-join runs instead)** when the key's types are not ones the set holds
  exactly (`indexable`), the table is too large for the memory budget the upsert key
  indexes share (`TABLEFLOW_KEY_INDEX_MAX_BYTES`: a build holds about twice the set), it
  has equality delete files, a data file cannot be read, or a hashed key repeats in it
  (a key held twice, or a shared hash: `KeyCollision`);
- **kept** in the process's `INDEXES` (warm across `tableflow run`'s batches), least
  recently used dropped first. Nothing is written anywhere: a kill -9 loses only the
  warm set, which the next process builds again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tableflow_core.errors import IngestError
from tableflow_core.pipeline.data_files import PositionDeletes, columns_by_field_id
from tableflow_core.pipeline.key_index import (
    INDEXES,
    IndexCache,
    KeyCodec,
    KeyCollision,
    Keys,
    KeySet,
    hash128,
    max_bytes,
    snapshots_since,
)

SCAN_THREADS = max(1, min(4, os.cpu_count() or 1))
# How a key that is not one integer column is hashed (tests put a weak hash here to make
# collisions happen).
HASHER: Callable[[Sequence[pa.Array | pa.ChunkedArray]], Keys] = hash128
_HASHABLE = (
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_boolean,
    pa.types.is_date32,
    pa.types.is_decimal,
    pa.types.is_integer,
)


class KeySetUnavailable(IngestError):
    """The table cannot be answered from a key set (equality deletes, a data file without
    the key column): the anti-join runs."""


def indexable(types: Sequence[pa.DataType]) -> bool:
    """Key column types whose values hash exactly: whole numbers, text, binary, booleans,
    dates, decimals, timestamps in micros (a float's -0.0 and NaN, or a nested value,
    would not compare as Spark's join does)."""
    return all(
        any(test(t) for test in _HASHABLE) or (pa.types.is_timestamp(t) and t.unit == "us")
        for t in types
    )


def set_bytes(types: Sequence[pa.DataType], rows: int) -> int:
    """Memory a build of a `rows`-row table's set peaks at (the keys twice: the sort)."""
    codec = KeyCodec(tuple(types))
    return rows * (8 if codec.integer else 16) * 2


def key_set_at(
    table: Any,
    snapshot_id: int,
    keys: Sequence[str],
    *,
    indexes: IndexCache = INDEXES,
    timings: dict[str, float] | None = None,
) -> KeySet | None:
    """The set of the dedup keys `table` (pyiceberg) holds at `snapshot_id` (the run's
    base, main's snapshot the publish asserts), or None: the caller anti-joins. The caller
    gives it back with `keep_key_set` once the batch is looked up."""
    timings = timings if timings is not None else {}
    types = _key_types(table, keys)
    if types is None or not indexable(types):
        return None
    name = _name(table, keys)
    held = indexes.take(name)
    codec = KeyCodec(types, hasher=HASHER)
    if isinstance(held, KeySet) and held.codec == codec:
        started = time.perf_counter()
        try:
            if _advance(table, held, snapshot_id, keys, types):
                timings["dedup_index_advance"] = time.perf_counter() - started
                return held
        except (OSError, pa.ArrowException, IngestError):
            pass  # built again below
    rows = _rows_at(table, snapshot_id)
    if rows is None or set_bytes(types, rows) > max_bytes():
        return None
    started = time.perf_counter()
    try:
        built = _build(table, snapshot_id, keys, codec)
    except (KeyCollision, KeySetUnavailable, OSError, pa.ArrowException):
        return None  # an unreadable file: the anti-join reads it, and says why it cannot
    timings["dedup_index_build"] = time.perf_counter() - started
    return built


def keep_key_set(
    table: Any, keys: Sequence[str], key_set: KeySet, indexes: IndexCache = INDEXES
) -> None:
    indexes.keep(_name(table, keys), key_set)


def _name(table: Any, keys: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    return (f"{table.metadata.table_uuid}/dedup", tuple(keys))


def _key_types(table: Any, keys: Sequence[str]) -> tuple[pa.DataType, ...] | None:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    schema = schema_to_pyarrow(table.schema())
    if any(schema.get_field_index(k) < 0 for k in keys):
        return None
    return tuple(schema.field(k).type for k in keys)


def _rows_at(table: Any, snapshot_id: int) -> int | None:
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    total = (snapshot.summary or {}).get("total-records") if snapshot is not None else None
    try:
        return int(total) if total is not None else None
    except ValueError:
        return None


class _Reader:
    """Key columns of a table's data files, found by field id (a renamed column keeps its
    id), cast to the set's types."""

    def __init__(self, table: Any, keys: Sequence[str], types: Sequence[pa.DataType]):
        self.table = table
        self.keys = tuple(keys)
        self.types = tuple(types)
        schema = table.schema()
        self.field_ids = [schema.find_field(k).field_id for k in keys]

    def read(self, path: str) -> list[pa.ChunkedArray]:
        with self.table.io.new_input(path).open() as stream:
            parquet = pq.ParquetFile(stream)
            in_file = columns_by_field_id(parquet.schema_arrow)
            missing = [
                k for k, i in zip(self.keys, self.field_ids, strict=True) if i not in in_file
            ]
            if missing:
                raise KeySetUnavailable(f"data file {path} has no key column {missing}")
            names = [in_file[i] for i in self.field_ids]
            read = parquet.read(columns=names, use_threads=False)
        return [read.column(n).cast(t) for n, t in zip(names, self.types, strict=True)]


def _build(table: Any, snapshot_id: int, keys: Sequence[str], codec: KeyCodec) -> KeySet:
    reader = _Reader(table, keys, codec.types)
    try:
        tasks = list(table.scan(snapshot_id=snapshot_id).plan_files())
    except (ValueError, NotImplementedError) as exc:  # equality deletes
        raise KeySetUnavailable(str(exc)) from exc
    deletes = PositionDeletes(table.io, KeySetUnavailable)

    def live_keys(task: Any) -> list[pa.ChunkedArray]:
        columns = reader.read(task.file.file_path)
        gone = deletes.of(task)
        if not len(gone):
            return columns
        live = np.ones(len(columns[0]), dtype=bool)
        live[gone[gone < len(live)]] = False
        mask = pa.array(live)
        return [c.filter(mask) for c in columns]

    with ThreadPoolExecutor(SCAN_THREADS, thread_name_prefix="tableflow-dedup") as pool:
        return KeySet.build(codec, snapshot_id, pool.map(live_keys, tasks))


def _advance(
    table: Any, key_set: KeySet, snapshot_id: int, keys: Sequence[str], types: Sequence[pa.DataType]
) -> bool:
    """Move `key_set` to `snapshot_id` by the data files appended since its snapshot; False
    when the history in between holds anything but appends and rewrites (or does not lead
    back to it): the caller builds the set again."""
    if key_set.snapshot_id == snapshot_id:
        return True
    between = snapshots_since(table, key_set.snapshot_id, snapshot_id)
    if between is None:
        return False
    added: list[Any] = []
    for snapshot in between:
        kind = _kind(snapshot)
        if kind is None:
            return False
        if kind == "append":
            added.extend(_added_data_files(table, snapshot))
    reader = _Reader(table, keys, types)
    for data_file in added:
        key_set.add(reader.read(data_file.file_path))
    key_set.snapshot_id = snapshot_id
    return True


def _kind(snapshot: Any) -> str | None:
    """ "append" (data files only added), "replace" (the same rows rewritten), else None."""
    summary = snapshot.summary
    if summary is None:
        return None
    operation = summary.operation.value
    if operation == "replace":
        return "replace"
    if operation != "append":
        return None
    for name in ("deleted-data-files", "added-delete-files", "removed-delete-files"):
        if int(summary.get(name) or 0):
            return None
    return "append"


def _added_data_files(table: Any, snapshot: Any) -> list[Any]:
    """The data files `snapshot` added (its manifests' ADDED entries of its own id)."""
    from pyiceberg.manifest import ManifestContent, ManifestEntryStatus

    files = []
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue
        if manifest.content != ManifestContent.DATA:
            raise KeySetUnavailable(f"snapshot {snapshot.snapshot_id} added delete files")
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if (
                entry.status == ManifestEntryStatus.ADDED
                and entry.snapshot_id == snapshot.snapshot_id
            ):
                files.append(entry.data_file)
    return files
