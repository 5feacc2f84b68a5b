"""An upsert table's first load written like an append: rows in the read tasks, only keys
to the driver.

A batch into a table that holds no rows updates nothing; what it must get right is that
each key ends on its latest record (`ingest/upsert_order.py`), and a key's records may sit
in several tasks (a key that moved between partitions, a partition's range split over
tasks). So:

1. each read task reduces the rows it holds to each key's latest record and writes the
   valued ones as the table's data files in the order they came, as an append table's
   task writes its rows (`write_latest`); it reports only each kept record's key, order
   columns and place (the task's data file and row; a tombstone has none), in key order;
2. the driver reduces those places over every task (`merge_first_load`): a written row
   whose key has a later record elsewhere, or whose key's remembered delete (the deletes
   table) comes after it, goes to a position delete file for its data file; each key's
   latest tombstone is remembered, as every run does;
3. the tasks' data files and those delete files are published with the offsets in one
   commit (the caller), and the key index of the table is built from the places
   (`MergedBatch.advance_index`), so the next batch of a `tableflow run` finds it warm.

The same records give the same table as the reduction on the driver did before: each
key's one live row is its latest record (latest-of is associative, so reducing within a
task first changes nothing), and a superseded row is never visible (its delete is in the
commit that adds it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from tableflow_core.errors import IngestError
from tableflow_core.ingest.columns import TOMBSTONE_COLUMN
from tableflow_core.ingest.upsert_order import TIMESTAMP_COLUMN, order_columns
from tableflow_core.pipeline.data_files import write_data_files
from tableflow_core.pipeline.key_index import (
    INDEXES,
    POSITION_BITS,
    IndexCache,
    KeyCodec,
    KeyCollision,
    KeyIndex,
    PendingIndex,
    bytes_per_key,
    index_name,
)
from tableflow_core.pipeline.upsert_rows import (
    SCAN_THREADS,
    DriverMergeUnsupported,
    MergedBatch,
    after_remembered,
    positioned,
    rows_by_key,
    timestamp_upper,
    write_position_deletes,
)

# A placed record's data file (the report's own list, then the run's; -1: a tombstone,
# written nowhere) and row in it.
PLACE_FILE = "__tf_place_file"
PLACE_ROW = "__tf_place_row"


@dataclass(frozen=True)
class WrittenLatest:
    """What a task wrote of its rows: the data files, and each kept record's key, order
    columns, tombstone flag and place (`PLACE_FILE`, `PLACE_ROW`)."""

    data_files: list[Any]
    placed: pa.Table


def write_latest(
    metadata: Any,
    io_properties: Mapping[str, str],
    rows: pa.Table,
    keys: Sequence[str],
    cdc: bool,
    first_file: int,
) -> WrittenLatest:
    """`rows` (decoded good rows and tombstones, the source columns kept) reduced to each
    key's latest record, the valued ones written as data files of the table in the order
    they came (`first_file`: the ordinal of the first of them among the task's files);
    the places in key order, so that the driver's sort of every task's places meets runs
    already sorted."""
    table = positioned(rows)
    order, superseded_at = rows_by_key(table, keys, cdc)
    kept = np.ones(table.num_rows, dtype=bool)
    kept[order[superseded_at]] = False
    valued = kept & ~table.column(TOMBSTONE_COLUMN).to_numpy(zero_copy_only=False)
    columns = table.select([n for n in table.schema.names if n != TOMBSTONE_COLUMN])
    written = columns if valued.all() else columns.filter(pa.array(valued))
    data_files = write_data_files(metadata, io_properties, written, in_order=True)
    counts = np.array([f.record_count for f in data_files], dtype=np.int64)
    if int(counts.sum()) != written.num_rows:
        raise IngestError(
            f"the data files written hold {int(counts.sum())} rows, not the "
            f"{written.num_rows} given: the rows' places are unknown"
        )
    files = np.full(table.num_rows, -1, dtype=np.int32)  # a tombstone's: written nowhere
    files[valued] = np.repeat(
        np.arange(first_file, first_file + len(counts), dtype=np.int32), counts
    )
    rows_in_file = np.full(table.num_rows, -1, dtype=np.int64)
    rows_in_file[valued] = np.arange(written.num_rows) - np.repeat(
        np.cumsum(counts) - counts, counts
    )
    latest = order[kept[order]]
    names = [*keys, *order_columns(cdc), TOMBSTONE_COLUMN]
    placed = table.select(names).take(pa.array(latest))
    return WrittenLatest(data_files, _with_place(placed, files[latest], rows_in_file[latest]))


def _with_place(rows: pa.Table, ordinals: np.ndarray, row_in_file: np.ndarray) -> pa.Table:
    return rows.append_column(PLACE_FILE, pa.array(ordinals, pa.int32())).append_column(
        PLACE_ROW, pa.array(row_in_file, pa.int64())
    )


def merge_first_load(
    table: Any,
    placed: pa.Table,
    data_files: Sequence[Any],
    keys: Sequence[str],
    read_deletes: Callable[[pa.Table], pa.Table | None],
    cdc: bool = False,
    indexes: IndexCache | None = INDEXES,
) -> MergedBatch:
    """The tasks' places (`placed`, `PLACE_FILE` an ordinal of `data_files`) reduced over
    the batch: what to publish into `table`, which holds no rows (module docstring).
    `read_deletes` as `upsert_rows.merge_batch`'s."""
    if table.metadata.format_version != 2:
        raise DriverMergeUnsupported(
            f"format version {table.metadata.format_version} (position delete files are v2's)"
        )
    delta = MergedBatch(data_files=list(data_files))
    if placed.num_rows == 0:
        return delta
    order, superseded_at = rows_by_key(placed, keys, cdc)
    superseded = order[superseded_at]
    files = placed.column(PLACE_FILE).to_numpy()
    rows = placed.column(PLACE_ROW).to_numpy()
    tombstone = placed.column(TOMBSTONE_COLUMN).to_numpy(zero_copy_only=False)
    latest = np.ones(placed.num_rows, dtype=bool)
    latest[superseded] = False
    dropped = [superseded[files[superseded] >= 0]]
    live = latest & ~tombstone
    # Every place's timestamp bounds what is read (the deletes table may not exist: then
    # nothing is taken out of the places for it).
    remembered = read_deletes(placed) if live.any() else None
    if remembered is not None:
        candidates = np.flatnonzero(live)
        keep = after_remembered(placed.take(pa.array(candidates)), remembered, keys, cdc)
        dropped.append(candidates[~keep])
        live[candidates[~keep]] = False
    gone = latest & tombstone
    if gone.any():
        delta.remembered = placed.filter(pa.array(gone)).select([*keys, *order_columns(cdc)])
    deleted = _deleted_by_file(np.concatenate(dropped), files, rows)

    def write(ordinal: int) -> Any:
        path = data_files[ordinal].file_path
        return write_position_deletes(table.io, table.metadata.location, path, deleted[ordinal])

    with ThreadPoolExecutor(SCAN_THREADS, thread_name_prefix="tableflow-deletes") as pool:
        delta.delete_files = list(pool.map(write, deleted))
    delta.rows_deleted = sum(len(positions) for positions in deleted.values())
    delta.rows_inserted = int(np.count_nonzero(live))
    if indexes is not None:
        by_key = order[live[order]]  # the live rows in key order: the index's sort is short
        locations = (files[by_key].astype(np.int64) << POSITION_BITS) | rows[by_key]
        live_keys = [placed.column(k).take(pa.array(by_key)) for k in keys]
        delta.advance_index = _indexer(table, keys, live_keys, locations, delta.data_files, indexes)
    return delta


def _deleted_by_file(
    dropped: np.ndarray, files: np.ndarray, rows: np.ndarray
) -> dict[int, np.ndarray]:
    """The dropped records' rows, by the ordinal of the data file holding them."""
    in_files = files[dropped]
    return {
        int(ordinal): np.sort(rows[dropped[in_files == ordinal]]) for ordinal in np.unique(in_files)
    }


def _indexer(
    table: Any,
    keys: Sequence[str],
    live_keys: Sequence[pa.ChunkedArray],
    locations: np.ndarray,
    data_files: Sequence[Any],
    indexes: IndexCache,
) -> Callable[[int], None]:
    """Once the load is published as `snapshot_id`: the table's key index, to be made of
    the live rows' keys and places (no read of the table) by the next batch that uses it
    (`key_index.PendingIndex`)."""
    codec = KeyCodec(tuple(column.type for column in live_keys))
    field_id = table.schema().find_field(TIMESTAMP_COLUMN).field_id

    def advance(snapshot_id: int) -> None:
        files = [(f.file_path, timestamp_upper(f, field_id)) for f in data_files]

        def settle() -> KeyIndex | None:
            try:
                return KeyIndex.of_rows(codec, snapshot_id, files, live_keys, locations)
            except KeyCollision:
                return None  # the next batch reads the table instead, as for any such index

        size = bytes_per_key(codec.types) * len(locations)
        indexes.keep(index_name(table, keys), PendingIndex(settle, size))

    return advance
