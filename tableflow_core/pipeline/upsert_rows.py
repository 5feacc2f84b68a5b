"""An upsert run's batch merged on the driver: position deletes and new rows, no Spark SQL.

The read tasks decode the run's records (`pipeline/shared_tasks.py`) and send them here;
the rule is the one Spark's MERGE applies (`ingest/upsert_order.py`,
`pipeline/runners/write_upsert.py`), on Arrow:

1. each key's latest record of the batch by (Kafka timestamp, partition, offset);
2. the batch's keys looked up in the table's key index (`pipeline/key_index.py`: each
   live row's key -> data file and row position at the run's base snapshot; kept by the
   process between batches, built from the table's key columns and delete files when it
   is not at that snapshot, in a new process while the batch is read: `build_index_ahead`).
   A held row whose key's batch record is later is deleted (its
   position goes to a position delete file for that data file); the position columns of
   a data file are read only when it holds matched rows and its timestamp upper bound is
   not before the batch's earliest record (otherwise every live row the batch matches is
   superseded). A batch record is inserted when it is later than the row it replaces, or
   its key is not in the table and it comes after the key's latest remembered delete
   (the deletes table, read only when such keys exist). Without an index (two live rows
   of one key, or a shared hash) every data file is read as before the index:
   its key column(s), and its position columns unless it is older than the batch, the
   rows its position deletes removed left out;
3. the rows to insert written as one data file, the deletes as one position delete file
   per data file; the batch's tombstones are remembered in the deletes table (its own
   commit, before the run's publish, as the Spark path does).

The caller publishes the data and delete files with the offsets in one snapshot
(`engine/run_branch.publish_run`), which the catalog accepts only while main is still at
the snapshot looked up here, then moves the index to that snapshot (`advance_index`).
Nothing here is visible before that commit.

The index holds 16 bytes a key (an integer key) or 24 (a hashed one), within
`TABLEFLOW_KEY_INDEX_MAX_BYTES` (4 GiB): the driver way is taken while the table's data
files hold at most `DRIVER_MERGE_MAX_ROWS` rows (that budget at 24 bytes a row; its
snapshot's `total-records`, rows position deletes removed included); a larger table runs
Spark's MERGE, whose scan is spread over the executors.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tableflow_core.catalog.transactions import transaction as transaction_of
from tableflow_core.engine.run_branch import rows_at
from tableflow_core.errors import IngestError
from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.ingest.columns import SOURCE_TIMESTAMP_COLUMN, TOMBSTONE_COLUMN, is_hidden
from tableflow_core.ingest.upsert_order import (
    CDC_LAST_COMMIT_COLUMN,
    CDC_LSN_COLUMN,
    DELETES_TABLE_PROPERTIES,
    OFFSET_COLUMN,
    PARTITION_COLUMN,
    POSITION_COLUMNS,
    TIMESTAMP_COLUMN,
    order_columns,
)
from tableflow_core.pipeline.data_files import (
    PositionDeletes,
    columns_by_field_id,
    write_data_files,
)
from tableflow_core.pipeline.key_index import (
    INDEXES,
    IndexCache,
    KeyCodec,
    KeyCollision,
    KeyIndex,
    PendingIndex,
    file_of,
    index_name,
    max_bytes,
    position_of,
    unchanged_rows,
)
from tableflow_core.schemas.write_schema import table_arrow_schema

# A hashed key's bytes in the index (an integer key's are 16: key_index.bytes_per_key).
HASHED_KEY_BYTES = 24
# Rows in the table's data files up to which the driver merges (above): what the key
# indexes' memory budget holds at 24 bytes a key.
DRIVER_MERGE_MAX_ROWS = max_bytes() // HASHED_KEY_BYTES
# Threads reading data files: pyarrow's Parquet reads and `index_in` release the GIL.
SCAN_THREADS = max(1, min(4, os.cpu_count() or 1))
# Iceberg's reserved field ids of a position delete file's columns.
_PATH_FIELD_ID = 2147483546
_POS_FIELD_ID = 2147483545
_DELETE_FILE_SCHEMA = pa.schema(
    [
        pa.field(
            "file_path", pa.string(), nullable=False,
            metadata={"PARQUET:field_id": str(_PATH_FIELD_ID)},
        ),
        pa.field(
            "pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": str(_POS_FIELD_ID)}
        ),
    ]
)  # fmt: skip
_EARLIEST = np.iinfo(np.int64).min  # a record without a timestamp sorts first
POSITIONS = tuple(POSITION_COLUMNS)


class DriverMergeUnsupported(IngestError):
    """The table is not one the driver's merge writes to (equality delete files, a format
    version other than 2, which position delete files belong to): the run takes Spark's
    MERGE instead."""


@dataclass
class MergedBatch:
    """What a batch changes: data files to add, position delete files to add, and the
    batch's deletes to remember; with the figures run_results reports."""

    data_files: list[Any] = field(default_factory=list)
    delete_files: list[Any] = field(default_factory=list)
    remembered: pa.Table | None = None  # key columns + POSITION_COLUMNS of the tombstones
    rows_inserted: int = 0
    rows_deleted: int = 0
    files_scanned: int = 0
    files_key_only: int = 0
    # Moves the key index the batch was looked up in to the snapshot the publish made
    # (call with its id once the publish committed); None: no index was used.
    advance_index: Callable[[int], None] | None = None
    timings: dict[str, float] = field(default_factory=dict)  # index build / lookup seconds


def latest_per_key(rows: pa.Table, keys: Sequence[str], cdc: bool = False) -> pa.Table:
    """Each key's latest record of `rows` (decoded good rows and tombstones, with the
    source columns), its position in POSITION_COLUMNS, the tombstone flag kept and the
    other hidden columns dropped."""
    return latest_of_each_key(positioned(rows), keys, cdc)


def positioned(rows: pa.Table) -> pa.Table:
    """`rows` (decoded, with the source columns) with their Kafka position in
    POSITION_COLUMNS, the tombstone flag kept and the other hidden columns dropped."""
    millis = rows.column(SOURCE_TIMESTAMP_COLUMN)
    positions = {
        TIMESTAMP_COLUMN: pc.multiply(millis.cast(pa.int64()), 1000).cast(
            POSITION_COLUMNS[TIMESTAMP_COLUMN]
        ),
        PARTITION_COLUMN: rows.column(SOURCE_PARTITION_COLUMN).cast(pa.int32()),
        OFFSET_COLUMN: rows.column(SOURCE_OFFSET_COLUMN).cast(pa.int64()),
    }
    kept = [n for n in rows.schema.names if not is_hidden(n) and n not in positions]
    table = rows.select(kept)
    for name, values in positions.items():
        table = table.append_column(name, values)
    return table.append_column(TOMBSTONE_COLUMN, rows.column(TOMBSTONE_COLUMN))


def latest_of_each_key(table: pa.Table, keys: Sequence[str], cdc: bool = False) -> pa.Table:
    """Each key's latest row of `table` (key columns and the order columns, with anything
    else): the batch's latest records, or the deletes table's latest delete per key."""
    if table.num_rows == 0:
        return table
    order, superseded = rows_by_key(table, keys, cdc)
    kept = np.ones(len(order), dtype=bool)
    kept[superseded] = False
    return table.take(pa.array(order[kept]))


def latest_order(
    table: pa.Table, keys: Sequence[str], cdc: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(rows of `table` by key, each key's latest first; True where a key's run begins:
    its latest row): one Arrow sort by key and position, the runs of equal keys found on
    the key columns alone."""
    order = _latest_first(table, keys, cdc)
    first = _first_of_each_key(table.select(list(keys)).take(order), keys)
    return order.to_numpy(), first


def _latest_first(table: pa.Table, keys: Sequence[str], cdc: bool = False) -> pa.Array:
    """Row order: by key, then each key's records latest first (a record without a
    timestamp, or without a source position, is the earliest; `table` holds the key and
    the order columns)."""
    positions = _positions_compared(table, cdc)
    order = pa.table(
        {
            **{f"k{i}": table.column(k) for i, k in enumerate(keys)},
            **{f"p{i}": p for i, p in enumerate(positions)},
        }
    )
    sort_keys = [
        *((f"k{i}", "ascending") for i in range(len(keys))),
        *((f"p{i}", "descending") for i in range(len(positions))),
    ]
    return pc.sort_indices(order, sort_keys=sort_keys)


def rows_by_key(
    table: pa.Table, keys: Sequence[str], cdc: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(the rows of `table` in key order; the places in that order of the rows that are
    not their key's latest). The rows are sorted by key alone (a stable sort, fast on
    runs already in key order: a first load's tasks send theirs so), and only the keys
    that occur more than once are ordered by position (`latest_order`): most keys of a
    large batch occur once (else all rows are sorted by key and position). A key of more
    than one column, or not an integer, is sorted by Arrow."""
    n = table.num_rows
    if n < 2:
        return np.arange(n, dtype=np.int64), np.empty(0, np.int64)
    column = table.column(keys[0]) if len(keys) == 1 else None
    if column is not None and pa.types.is_integer(column.type) and not column.null_count:
        return _integer_rows_by_key(table, column.to_numpy(), cdc)
    sort_keys = [(k, "ascending") for k in keys]
    order = pc.sort_indices(table.select(list(keys)), sort_keys=sort_keys).to_numpy()
    same = ~_first_of_each_key(table.select(list(keys)).take(order), keys)[1:]
    at = _repeated(same)
    if not len(at):
        return order, np.empty(0, np.int64)
    if len(at) > n // 4:  # many repeated keys: one sort by key and position is cheaper
        order, first = latest_order(table, keys, cdc)
        return order, np.flatnonzero(~first)
    sub_order, sub_first = latest_order(table.take(pa.array(order[at])), keys, cdc)
    return order, at[sub_order[~sub_first]]


def _integer_rows_by_key(
    table: pa.Table, values: np.ndarray, cdc: bool
) -> tuple[np.ndarray, np.ndarray]:
    """`rows_by_key` of a one-column integer key (`values`), by numpy: a stable sort by
    key, then each repeated key's latest row found by comparing positions within its run
    (`_latest_of_runs`), no second sort."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    at = _repeated(ordered[1:] == ordered[:-1])
    if not len(at):
        return order, np.empty(0, np.int64)
    rows = order[at]
    keys = ordered[at]
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    positions = [p[rows] for p in _positions_compared(table, cdc)]
    superseded = np.ones(len(at), dtype=bool)
    superseded[_latest_of_runs(positions, starts)] = False
    return order, at[superseded]


def _latest_of_runs(positions: Sequence[np.ndarray], starts: np.ndarray) -> np.ndarray:
    """The latest row of each run (`starts`: where each run begins; `positions`: the rows'
    integers compared, most significant first): the rows holding their run's largest
    first integer, of those the largest second, and so on; of rows equal in all, the
    first (as a stable sort, latest first, keeps them)."""
    n = len(positions[0])
    run_of = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    candidate = np.ones(n, dtype=bool)
    for position in positions:
        floor = np.iinfo(position.dtype).min  # a row no longer a candidate
        best = np.maximum.reduceat(np.where(candidate, position, floor), starts)
        candidate &= position == best[run_of]
    remaining = np.flatnonzero(candidate)
    runs = run_of[remaining]
    return remaining[np.concatenate(([True], runs[1:] != runs[:-1]))]


def _repeated(same: np.ndarray) -> np.ndarray:
    """Places (in key order) of the rows whose key occurs more than once; `same`: a
    row's key is the one before it, from the second row on."""
    repeated = np.zeros(len(same) + 1, dtype=bool)
    repeated[1:] = same
    repeated[:-1] |= same
    return np.flatnonzero(repeated)


def _positions_compared(table: pa.Table, cdc: bool) -> list[np.ndarray]:
    """The integers a key's records are ordered by, most significant first (as
    `_latest_first` sorts them)."""
    ts, partition, offset, _ = _position_arrays(table)
    if not cdc:
        return [ts, partition, offset]
    commit, lsn, _ = _cdc_arrays(table)
    return [commit, lsn, ts, partition, offset]


def _first_of_each_key(ordered: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """True on the first row of each run of equal keys (`ordered` sorted by the keys)."""
    n = ordered.num_rows
    first = np.zeros(n, dtype=bool)
    first[0] = True
    for key in keys:
        column = ordered.column(key)
        differs = pc.not_equal(column.slice(1), column.slice(0, n - 1))
        first[1:] |= pc.fill_null(differs, True).to_numpy(zero_copy_only=False)
    return first


def earliest_timestamp(records: pa.Table) -> int | None:
    """The earliest Kafka timestamp of `records` (epoch micros), or None when one of them
    has none (it is then the earliest of all) or there are none."""
    ts = records.column(TIMESTAMP_COLUMN)
    if len(ts) == 0 or ts.null_count:
        return None
    earliest: int = pc.min(ts.cast(pa.int64())).as_py()
    return earliest


def timestamp_upper(data_file: Any, field_id: int) -> int | None:
    """`data_file`'s `_kafka_timestamp` upper bound (epoch micros; `field_id`: the
    column's), if it has one."""
    upper = (data_file.upper_bounds or {}).get(field_id)
    return None if upper is None else int.from_bytes(upper[:8], "little", signed=True)


def _position_arrays(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(timestamp micros, partition, offset, unknown) of each row; a NULL timestamp is the
    earliest, a NULL offset (a row written before the table kept positions) earlier than
    any record."""
    ts = pc.fill_null(table.column(TIMESTAMP_COLUMN).cast(pa.int64()), _EARLIEST)
    offsets = table.column(OFFSET_COLUMN)
    return (
        ts.to_numpy(),
        pc.fill_null(table.column(PARTITION_COLUMN), -1).to_numpy(),
        pc.fill_null(offsets, -1).to_numpy(),
        offsets.is_null().to_numpy(zero_copy_only=False),
    )


def _cdc_arrays(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(last commit LSN, LSN, has a source position) of each row of a change stream's
    batch or table; a missing LSN sorts first."""
    lsn = table.column(CDC_LSN_COLUMN)
    return (
        pc.fill_null(table.column(CDC_LAST_COMMIT_COLUMN), _EARLIEST).to_numpy(),
        pc.fill_null(lsn, _EARLIEST).to_numpy(),
        lsn.is_valid().to_numpy(zero_copy_only=False),
    )


def later(new: pa.Table, old: pa.Table, cdc: bool = False) -> np.ndarray:
    """Row by row: `new`'s position comes after `old`'s (write_upsert.later's rule). With
    `cdc`, by source position when both have one, the Kafka position breaking ties;
    otherwise by Kafka position alone."""
    nt, np_, no, _ = _position_arrays(new)
    ot, op, oo, old_unknown = _position_arrays(old)
    after = old_unknown | (nt > ot) | ((nt == ot) & ((np_ > op) | ((np_ == op) & (no > oo))))
    if cdc:
        nc, nl, new_has = _cdc_arrays(new)
        oc, ol, old_has = _cdc_arrays(old)
        same = (nc == oc) & (nl == ol)
        source_after = (nc > oc) | ((nc == oc) & (nl > ol)) | (same & after)
        after = np.where(new_has & old_has, source_after, after)
    return np.asarray(after, dtype=bool)


def _match(
    stored: pa.Table, latest: pa.Table, keys: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """(row of `stored`, row of `latest`) for every stored row whose key is in `latest`."""
    if len(keys) == 1:
        (key,) = keys
        found = pc.index_in(stored.column(key), value_set=latest.column(key))
        rows = np.flatnonzero(found.is_valid().to_numpy(zero_copy_only=False))
        batch_rows = found.take(pa.array(rows)).to_numpy(zero_copy_only=False)
        return rows.astype(np.int64), batch_rows.astype(np.int64)
    left = stored.select(list(keys)).append_column(
        "__tf_row", pa.array(np.arange(stored.num_rows, dtype=np.int64))
    )
    right = latest.select(list(keys)).append_column(
        "__tf_batch_row", pa.array(np.arange(latest.num_rows, dtype=np.int64))
    )
    joined = left.join(right, keys=list(keys), join_type="inner")
    return (
        joined.column("__tf_row").to_numpy(),
        joined.column("__tf_batch_row").to_numpy(),
    )


@dataclass(frozen=True)
class _FileMatches:
    path: str
    positions: np.ndarray  # rows of the data file to delete
    held: np.ndarray  # batch rows whose key the file holds live
    newer: np.ndarray  # batch rows later than the row they replace
    key_only: bool


class _Scan:
    """The table's data files at the run's base snapshot matched against the batch."""

    def __init__(
        self, table: Any, snapshot_id: int, latest: pa.Table, keys: Sequence[str], cdc: bool
    ):
        self.table = table
        self.snapshot_id = snapshot_id
        self.latest = latest
        self.keys = tuple(keys)
        self.cdc = cdc
        self.positions = tuple(order_columns(cdc))
        schema = table.schema()  # field ids never change: any schema's are the current's
        self.field_ids = {
            name: schema.find_field(name).field_id for name in (*keys, *self.positions)
        }
        self._deletes = PositionDeletes(table.io, DriverMergeUnsupported)
        # A change stream's order is the source's: a later Kafka timestamp says nothing.
        self._earliest = None if cdc else earliest_timestamp(latest)

    def tasks(self) -> list[Any]:
        try:
            return list(self.table.scan(snapshot_id=self.snapshot_id).plan_files())
        except (ValueError, NotImplementedError) as exc:  # equality deletes
            raise DriverMergeUnsupported(str(exc)) from exc

    def deleted_positions(self, task: Any) -> np.ndarray:
        """Rows of the task's data file its delete files removed."""
        return self._deletes.of(task)

    def timestamp_upper(self, data_file: Any) -> int | None:
        return timestamp_upper(data_file, self.field_ids[TIMESTAMP_COLUMN])

    def older_than_batch(self, data_file: Any) -> bool:
        """Every row of `data_file` comes before every record of the batch (its timestamp
        upper bound is before the batch's earliest timestamp): then a matched live row is
        superseded, and its position columns need not be read."""
        return self._older(self.timestamp_upper(data_file))

    def _older(self, upper: int | None) -> bool:
        if upper is None or self._earliest is None:
            return False
        return upper < self._earliest

    def read(self, path: str, names: Sequence[str]) -> pa.Table:
        """Columns `names` of a data file, found by field id (a renamed column keeps its
        id); a position column the file lacks (written before the table kept positions)
        is NULL."""
        with self.table.io.new_input(path).open() as stream:
            parquet = pq.ParquetFile(stream)
            in_file = columns_by_field_id(parquet.schema_arrow)
            wanted = [in_file[self.field_ids[n]] for n in names if self.field_ids[n] in in_file]
            read = parquet.read(columns=wanted, use_threads=False)
        columns = []
        for name in names:
            expected = self.latest.schema.field(name).type
            file_name = in_file.get(self.field_ids[name])
            if file_name is None:
                if name in self.keys:
                    raise DriverMergeUnsupported(f"data file {path} has no key column {name!r}")
                columns.append(pa.nulls(read.num_rows, expected))
            else:
                columns.append(read.column(file_name).cast(expected))
        return pa.table(columns, names=list(names))

    def _indexed_file(self, task: Any) -> tuple[str, int | None, list[pa.ChunkedArray], Any]:
        """A data file as the key index is built from: path, timestamp upper bound, key
        columns, positions its delete files removed."""
        stored = self.read(task.file.file_path, self.keys)
        deleted = self.deleted_positions(task) if task.delete_files else np.empty(0, np.int64)
        upper = self.timestamp_upper(task.file)
        return task.file.file_path, upper, [stored.column(k) for k in self.keys], deleted

    def build_index(self) -> KeyIndex:
        """The key index of the table at the run's base snapshot (every data file's key
        columns and delete files read once, a thread per file)."""
        codec = KeyCodec(tuple(self.latest.schema.field(k).type for k in self.keys))
        tasks = self.tasks()
        with ThreadPoolExecutor(SCAN_THREADS, thread_name_prefix="tableflow-index") as pool:
            return KeyIndex.build(codec, self.snapshot_id, pool.map(self._indexed_file, tasks))

    def added_files(self, data_files: Sequence[Any]) -> list[tuple[str, int | None, Any]]:
        """The batch's data files as the index advances by them (their keys read back:
        the file writer may split and order the rows)."""
        added = []
        for data_file in data_files:
            stored = self.read(data_file.file_path, self.keys)
            columns = [stored.column(k) for k in self.keys]
            added.append((data_file.file_path, self.timestamp_upper(data_file), columns))
        return added

    def index_matches(self, index: KeyIndex) -> tuple[list[_FileMatches], np.ndarray]:
        """The batch's keys looked up in the key index: matches grouped by data file
        (position columns read only for matched rows of files not older than the batch),
        and each batch row's location (-1: not held)."""
        locations = index.lookup_columns([self.latest.column(k) for k in self.keys])
        batch_rows = np.flatnonzero(locations >= 0)
        ordinals = file_of(locations[batch_rows])
        order = np.argsort(ordinals, kind="stable")
        batch_rows, ordinals = batch_rows[order], ordinals[order]
        starts = np.flatnonzero(ordinals[1:] != ordinals[:-1]) + 1
        groups = np.split(batch_rows, starts) if len(batch_rows) else []

        def match(rows: np.ndarray) -> _FileMatches:
            ordinal = int(file_of(locations[rows[:1]])[0])
            path = index.files[ordinal]
            positions = position_of(locations[rows])
            key_only = self._older(index.timestamp_upper[ordinal])
            if key_only:
                newer = np.ones(len(rows), dtype=bool)
            else:
                stored = self.read(path, self.positions).take(pa.array(positions))
                newer = later(self.latest.take(pa.array(rows)), stored, self.cdc)
            return _FileMatches(path, positions[newer], rows, rows[newer], key_only)

        with ThreadPoolExecutor(SCAN_THREADS, thread_name_prefix="tableflow-merge") as pool:
            return list(pool.map(match, groups)), locations

    def match_file(self, task: Any) -> _FileMatches:
        key_only = self.older_than_batch(task.file)
        names = self.keys if key_only else (*self.keys, *self.positions)
        stored = self.read(task.file.file_path, names)
        rows, batch_rows = _match(stored, self.latest, self.keys)
        if len(rows) and task.delete_files:
            live = ~np.isin(rows, self.deleted_positions(task))
            rows, batch_rows = rows[live], batch_rows[live]
        if key_only:
            newer = np.ones(len(rows), dtype=bool)
        else:
            newer = later(
                self.latest.take(pa.array(batch_rows)), stored.take(pa.array(rows)), self.cdc
            )
        return _FileMatches(
            task.file.file_path, rows[newer], batch_rows, batch_rows[newer], key_only
        )


def after_remembered(
    candidates: pa.Table, deletes: pa.Table, keys: Sequence[str], cdc: bool = False
) -> np.ndarray:
    """Row by row: the candidate comes after its key's latest remembered delete, or at its
    very position (a delete remembered by a run that did not publish), or its key has
    none."""
    keep = np.ones(candidates.num_rows, dtype=bool)
    if candidates.num_rows == 0 or deletes.num_rows == 0:
        return keep
    latest_deletes = latest_of_each_key(deletes, keys, cdc)
    names = [*keys, *order_columns(cdc)]
    typed = pa.table(
        [latest_deletes.column(n).cast(candidates.schema.field(n).type) for n in names],
        names=names,
    )
    rows, delete_rows = _match(candidates, typed, keys)
    if len(rows):
        earlier = later(typed.take(pa.array(delete_rows)), candidates.take(pa.array(rows)), cdc)
        keep[rows[earlier]] = False
    return keep


def merge_batch(
    table: Any,
    base_snapshot_id: int | None,
    rows: pa.Table,
    keys: Sequence[str],
    read_deletes: Callable[[pa.Table], pa.Table | None],
    io_properties: Mapping[str, str],
    cdc: bool = False,
    indexes: IndexCache | None = INDEXES,
    remember: Callable[[pa.Table], None] | None = None,
) -> MergedBatch:
    """The batch (`rows`: decoded good rows and tombstones) merged into `table` as it is at
    `base_snapshot_id` (None: a table without rows): the files to publish.
    `read_deletes(candidates)` gives the deletes table's rows that may come after some of
    the candidates (the batch's records of keys the table does not hold; None: the table
    has no deletes table). `cdc`: a change stream's mirror, ordered by source position
    first (ingest/upsert_order.py). `indexes`: where the table's key index is kept between
    batches (pipeline/key_index.py; None: every data file's keys are read instead); the
    caller calls the result's `advance_index` once its publish committed. `remember`:
    the batch's tombstones appended to the deletes table, called here once that table
    has been read, while the files are written (else left to the caller in the result's
    `remembered`)."""
    if table.metadata.format_version != 2:
        raise DriverMergeUnsupported(
            f"format version {table.metadata.format_version} (position delete files are v2's)"
        )
    latest = latest_per_key(rows, keys, cdc)
    n = latest.num_rows
    tombstone = latest.column(TOMBSTONE_COLUMN).to_numpy(zero_copy_only=False)
    held, newer = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    delta = MergedBatch()
    to_delete: list[_FileMatches] = []
    if base_snapshot_id is not None and n:
        scan = _Scan(table, base_snapshot_id, latest, keys, cdc)
        index = _index_at(scan, indexes, delta.timings) if indexes is not None else None
        if index is not None:
            started = time.perf_counter()
            found, _ = scan.index_matches(index)
            delta.timings["index_lookup"] = time.perf_counter() - started
            delta.files_scanned = len(found)  # the data files holding the batch's keys
        else:
            tasks = scan.tasks()
            with ThreadPoolExecutor(SCAN_THREADS, thread_name_prefix="tableflow-merge") as pool:
                found = list(pool.map(scan.match_file, tasks))
            delta.files_scanned = len(tasks)
        for matches in found:
            held[matches.held] = True
            newer[matches.newer] = True
            delta.files_key_only += matches.key_only
            if len(matches.positions):
                to_delete.append(matches)
        if index is not None:
            assert indexes is not None
            replaced = np.concatenate([m.newer for m in found] or [np.empty(0, np.int64)])
            delta.advance_index = _advancer(scan, index, indexes, replaced, delta)
    fresh = ~held & ~tombstone
    if fresh.any():
        where = np.flatnonzero(fresh)
        candidates = latest.take(pa.array(where))
        remembered = read_deletes(candidates)
        if remembered is not None:
            fresh[where] = after_remembered(candidates, remembered, keys, cdc)
    insert = ((held & newer) | fresh) & ~tombstone
    columns = [n for n in latest.schema.names if n != TOMBSTONE_COLUMN]
    inserted = latest.filter(pa.array(insert)).select(columns)
    tombstones = None
    if tombstone.any():
        tombstones = latest.filter(pa.array(tombstone)).select([*keys, *order_columns(cdc)])
    if remember is None:
        delta.remembered = tombstones
    location = table.metadata.location
    # The delete files written, and the tombstones remembered, while the data files are
    # (Parquet's writer leaves the GIL).
    with ThreadPoolExecutor(SCAN_THREADS, thread_name_prefix="tableflow-deletes") as pool:
        remembering = None
        if remember is not None and tombstones is not None:
            remembering = pool.submit(_timed, remember, tombstones)
        deletes = [
            pool.submit(write_position_deletes, table.io, location, m.path, m.positions)
            for m in to_delete
        ]
        delta.data_files = write_data_files(table.metadata, io_properties, inserted)
        delta.delete_files = [written.result() for written in deletes]
        if remembering is not None:
            delta.timings["merge_remember_deletes"] = remembering.result()
    delta.rows_inserted = inserted.num_rows
    delta.rows_deleted = sum(len(m.positions) for m in to_delete)
    return delta


def _timed(call: Callable[[pa.Table], None], rows: pa.Table) -> float:
    started = time.perf_counter()
    call(rows)
    return time.perf_counter() - started


def _index_at(scan: _Scan, indexes: IndexCache, timings: dict[str, float]) -> KeyIndex | None:
    """The table's key index at the run's base snapshot: the cached one when it is at that
    snapshot or only delete files were rewritten since (same rows, same positions), else
    built from the table; None when two live rows share a key (or a hash)."""
    name = index_name(scan.table, scan.keys)
    started = time.perf_counter()
    index = indexes.take(name)  # the last batch's move of the index made now, if pending
    timings["index_take"] = time.perf_counter() - started
    codec = KeyCodec(tuple(scan.latest.schema.field(k).type for k in scan.keys))
    usable = index is not None and index.codec.types == codec.types
    if usable and index is not None:
        since = index.snapshot_id
        if since == scan.snapshot_id or unchanged_rows(scan.table, since, scan.snapshot_id):
            index.snapshot_id = scan.snapshot_id
            return index
    started = time.perf_counter()
    try:
        built = scan.build_index()
    except KeyCollision:
        return None
    timings["index_build"] = time.perf_counter() - started
    return built


def build_index_ahead(
    table: Any, snapshot_id: int, keys: Sequence[str], cdc: bool, indexes: IndexCache = INDEXES
) -> None:
    """Start building the table's key index at `snapshot_id` in a thread of its own, when
    `indexes` holds none: the caller reads and decodes its batch meanwhile, and the
    batch's merge takes the index (`_index_at`, waiting for it if need be). The build's
    Parquet reads and sort leave the GIL, which the decode holds: on two cores they run
    beside it instead of after it (a one-shot `tableflow apply`'s batch; a warm
    `tableflow run` holds its index). The types are the table's own: an index built by
    other types than the batch's is not used (the merge builds its own), nor is one whose
    build failed (the merge's build meets that error itself)."""
    name = index_name(table, keys)
    if indexes.holds(name):
        return
    built: Future[KeyIndex] = Future()

    def build() -> None:
        try:
            empty = table_arrow_schema(table.schema()).empty_table()
            built.set_result(_Scan(table, snapshot_id, empty, keys, cdc).build_index())
        except BaseException as exc:  # not used: the merge builds the index anew
            built.set_exception(exc)

    def settle() -> KeyIndex | None:
        return None if built.exception() is not None else built.result()

    most = (rows_at(table, snapshot_id) or 0) * HASHED_KEY_BYTES  # the cache's budget
    indexes.keep(name, PendingIndex(settle, most))
    threading.Thread(target=build, name="tableflow-index-ahead", daemon=True).start()


def _advancer(
    scan: _Scan, index: KeyIndex, indexes: IndexCache, replaced: np.ndarray, delta: MergedBatch
) -> Callable[[int], None]:
    """Once the batch is published as `snapshot_id`: the index kept for the next batch,
    which moves it there (the rows the batch deleted removed, its data files' keys added:
    `key_index.PendingIndex`)."""
    removed = scan.latest.take(pa.array(replaced)).select(list(scan.keys))

    def advance(snapshot_id: int) -> None:
        # The batch is published: an index that cannot follow (a data file unreadable
        # now) is dropped, not an error; the next batch builds it from the table.
        try:
            added = scan.added_files(delta.data_files)
            removed_keys = index.codec.encode(removed.columns)
        except (OSError, IngestError, pa.ArrowException):
            return

        def settle() -> KeyIndex | None:
            try:
                index.advance(snapshot_id, removed_keys, added)
            except (IngestError, pa.ArrowException):
                return None
            return index

        indexes.keep(index_name(scan.table, scan.keys), PendingIndex(settle, index.nbytes))

    return advance


def write_position_deletes(io: Any, location: str, data_path: str, positions: np.ndarray) -> Any:
    """One position delete file for data file `data_path` (`positions`: its rows), sorted
    by position, its `file_path` bounds equal so readers index it by that data file, in
    the table `location`'s data folder; its DataFile."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    positions = np.sort(positions)
    path = f"{location.rstrip('/')}/data/delete-{uuid.uuid4()}.parquet"
    rows = pa.table(
        {"file_path": pa.array([data_path] * len(positions), pa.string()), "pos": positions},
        schema=_DELETE_FILE_SCHEMA,
    )
    output = io.new_output(path)
    with output.create() as stream:
        pq.write_table(rows, stream, compression="zstd")
    encoded = data_path.encode()
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=len(positions),
        file_size_in_bytes=len(io.new_input(path)),
        lower_bounds={
            _PATH_FIELD_ID: encoded,
            _POS_FIELD_ID: int(positions[0]).to_bytes(8, "little", signed=True),
        },
        upper_bounds={
            _PATH_FIELD_ID: encoded,
            _POS_FIELD_ID: int(positions[-1]).to_bytes(8, "little", signed=True),
        },
    )


class DeletesTable:
    """The deletes table beside an upsert table (ingest/upsert_order.deletes_table), read
    and appended to through pyiceberg."""

    def __init__(
        self, catalog: Any, identifier: tuple[str, ...], keys: Sequence[str], cdc: bool = False
    ) -> None:
        self._catalog = catalog
        self._identifier = identifier
        self._keys = tuple(keys)
        self._cdc = cdc

    def read(self, candidates: pa.Table) -> pa.Table | None:
        """Its rows (key columns and position) that may come after one of `candidates`
        (None when it does not exist). A delete whose timestamp is before every
        candidate's comes before all of them and cannot drop one: when every candidate
        has a timestamp, only deletes at or after the earliest are read, and the files
        whose timestamp upper bound is before it are not opened (the deletes table grows
        by a file per run that deleted; a run's candidates are recent)."""
        from pyiceberg.expressions import AlwaysTrue, GreaterThanOrEqual

        if not self._catalog.table_exists(self._identifier):
            return None
        table = self._catalog.load_table(self._identifier)
        # A change stream's deletes are ordered by source position: all are read.
        micros = None if self._cdc else earliest_timestamp(candidates)
        row_filter: Any = AlwaysTrue()
        if micros is not None:  # a long binds to a timestamptz column as epoch micros
            row_filter = GreaterThanOrEqual(term=TIMESTAMP_COLUMN, value=micros)
        selected = (*self._keys, *order_columns(self._cdc))
        scan = table.scan(row_filter=row_filter, selected_fields=selected)
        return scan.to_arrow()

    def remember(self, rows: pa.Table) -> None:
        """Append the batch's deletes (created on first use), in its own commit."""
        from pyiceberg.exceptions import TableAlreadyExistsError

        schema = pa.schema([f.with_nullable(True) for f in rows.schema])
        if not self._catalog.table_exists(self._identifier):
            with contextlib.suppress(TableAlreadyExistsError):  # another run created it
                self._catalog.create_table(
                    self._identifier, schema=schema, properties=DELETES_TABLE_PROPERTIES
                )
        table = self._catalog.load_table(self._identifier)
        with transaction_of(table) as transaction:
            transaction.append(rows.cast(schema))
