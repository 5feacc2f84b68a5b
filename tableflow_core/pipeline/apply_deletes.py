"""An upsert table's position deletes applied on the driver: each data file with deletes
rewritten without its deleted rows, in one `replace` commit (docs/maintenance.md,
"Delete files in check").

What Spark's `rewrite_data_files` (delete-file-threshold 1, dangling deletes removed) does
for an upsert table's readers, at a fraction of its cost (benchmarks/apply_deletes_cost.py):

1. the data files of the table's current snapshot that carry position delete files
   (pyiceberg's scan planning pairs them), and each one's deleted positions;
2. each such file streamed (batches of `BATCH_ROWS`, through the table's FileIO: any
   storage), its deleted rows dropped, written as a new data file: the old file's columns,
   Arrow schema and field ids, its partition and spec, the table's Parquet settings
   (compression, row group and page sizes), row groups of the table's row-group limit,
   Iceberg column metrics as pyiceberg's writer computes them. One file at a time: memory
   holds a row group, never the table. A file whose rows are all deleted is only removed;
3. one commit (`engine/rewrite_files.RewriteFiles`): the old data files and every delete
   file paired with them removed (each names only rewritten files: a delete file that
   names a data file is paired with it), the new files added with the new snapshot's
   sequence number. The commit asserts the branch is still where the rewrite started;
   if anything committed meanwhile, the new files are deleted and nothing is committed
   (a later maintenance tries again): the rewrite never drops a delete file it has not
   applied.

Maintenance holds the table's lock while it runs (maintenance/run.py), so an ingest of
the table from this project waits for it rather than making it give up.

Rows move (new file, new positions): the process's key index of the table
(`key_index.INDEXES`), when it is at the snapshot the rewrite started from, is remapped
onto the new files (`KeyIndex.rewritten`) instead of being rebuilt by the next batch. A
dedup key set stays as it is (`replace`: the same keys).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tableflow_core.catalog.transactions import transaction as transaction_of
from tableflow_core.engine.rewrite_files import RewriteFiles
from tableflow_core.engine.test_hooks import crash_point
from tableflow_core.errors import TableflowError
from tableflow_core.maintenance.delete_load import APPLY_DELETES
from tableflow_core.maintenance.operations import OPERATIONS, Operation
from tableflow_core.pipeline.data_files import PositionDeletes
from tableflow_core.pipeline.key_index import INDEXES, IndexCache, KeyIndex

BATCH_ROWS = 65_536  # rows read at a time from the old file
# Test crash points (engine/test_hooks.py) around the commit.
CRASH_BEFORE_COMMIT = "apply_deletes_before_commit"
CRASH_AFTER_COMMIT = "apply_deletes_after_commit"


class ApplyDeletesError(TableflowError, RuntimeError):
    """The rewrite could not be committed (the table changed meanwhile), or the table is
    not one the driver rewrites (`ApplyDeletesUnsupported`)."""


class ApplyDeletesUnsupported(ApplyDeletesError):
    """Equality delete files, a data file that is not Parquet, a format version other than
    2 (deletion vectors, row lineage): `maintain` runs Spark's rewrite instead."""


@dataclass(frozen=True)
class RewrittenFile:
    """A data file rewritten without its deleted rows."""

    old: Any  # pyiceberg DataFile
    deleted: np.ndarray  # its rows removed, sorted, unique
    new: Any | None  # the new DataFile; None: every row was deleted
    offset: int = 0  # the row of `new` the old file's first kept row is at

    def new_positions(self, positions: np.ndarray) -> np.ndarray:
        """Where live rows of the old file are in the new one."""
        return self.offset + positions - np.searchsorted(self.deleted, positions)


@dataclass
class ApplyDeletesResult:
    base_snapshot_id: int | None
    snapshot_id: int | None = None  # the replace snapshot (None: nothing to commit)
    files: list[RewrittenFile] = field(default_factory=list)
    delete_files: int = 0
    seconds: float = 0.0
    index_remapped: bool = False

    def metrics(self) -> dict[str, Any]:
        """What `maintain` reports for the operation."""
        return {
            "rewritten_data_files_count": len(self.files),
            "added_data_files_count": len(_new_paths(self)),
            "removed_delete_files_count": self.delete_files,
            "rows_dropped": int(sum(len(f.deleted) for f in self.files)),
            "rows_rewritten": int(sum(f.old.record_count - len(f.deleted) for f in self.files)),
            "index_remapped": self.index_remapped,
        }


def files_with_deletes(table: Any, snapshot_id: int) -> list[Any]:
    """The scan tasks of `snapshot_id` whose data file has position delete files."""
    from pyiceberg.manifest import DataFileContent, FileFormat
    from pyiceberg.table import DataScan

    try:
        tasks = DataScan(table_metadata=table.metadata, io=table.io, snapshot_id=snapshot_id)
        found = [t for t in tasks.plan_files() if t.delete_files]
    except (ValueError, NotImplementedError) as exc:  # equality deletes
        raise ApplyDeletesUnsupported(str(exc)) from exc
    for task in found:
        if task.file.file_format != FileFormat.PARQUET:
            raise ApplyDeletesUnsupported(f"data file {task.file.file_path} is not Parquet")
        for delete_file in task.delete_files:
            if delete_file.content != DataFileContent.POSITION_DELETES:
                raise ApplyDeletesUnsupported(f"equality delete file {delete_file.file_path}")
    return found


def _kept_batches(
    parquet: pq.ParquetFile, deleted: np.ndarray, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """The file's rows in order, the `deleted` positions left out."""
    start = 0
    for batch in parquet.iter_batches(batch_size=batch_rows, use_threads=False):
        end = start + batch.num_rows
        lo, hi = np.searchsorted(deleted, [start, end])
        if hi > lo:
            keep = np.ones(batch.num_rows, dtype=bool)
            keep[deleted[lo:hi] - start] = False
            batch = batch.filter(pa.array(keep))
        start = end
        if batch.num_rows:
            yield batch


class NewDataFile:
    """A data file being written from the kept rows of old data files of one partition and
    one Arrow schema, in order, streamed: row groups of the table's row-group limit, the
    table's Parquet settings, Iceberg column metrics as pyiceberg's writer computes them."""

    def __init__(self, table: Any, first: Any, schema: pa.Schema, batch_rows: int) -> None:
        from pyiceberg.io.pyarrow import ParquetFormatModel, pyarrow_to_schema
        from pyiceberg.table import TableProperties
        from pyiceberg.utils.properties import property_as_int

        properties = table.metadata.properties
        self.group_rows = (
            property_as_int(
                properties,
                TableProperties.PARQUET_ROW_GROUP_LIMIT,
                TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT,
            )
            or TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT
        )
        self.table, self.first, self.schema, self.batch_rows = table, first, schema, batch_rows
        name = f"00000-0-{uuid.uuid4()}.parquet"
        self.path: str = table.location_provider().new_data_location(name)
        # The old files' own columns and field ids (a file written before a schema change
        # keeps its columns; readers project by field id).
        self._writer = ParquetFormatModel().create_writer(
            table.io.new_output(self.path), pyarrow_to_schema(schema), properties
        )
        self.rows = 0  # rows added so far
        self.sources = 0  # old files added
        self.bytes_estimate = 0  # the old files' bytes, less their deleted rows' share
        self._held: list[pa.RecordBatch] = []
        self._held_rows = 0

    def add(self, parquet: pq.ParquetFile, data_file: Any, deleted: np.ndarray) -> int:
        """The kept rows of `data_file` (open as `parquet`) appended; the row of this file
        its first kept row lands at."""
        offset = self.rows
        for batch in _kept_batches(parquet, deleted, self.batch_rows):
            self._held.append(batch)
            self._held_rows += batch.num_rows
            self.rows += batch.num_rows
            while self._held_rows >= self.group_rows:
                self._flush(self.group_rows)
        kept = 1 - len(deleted) / max(1, data_file.record_count)
        self.bytes_estimate += int(data_file.file_size_in_bytes * kept)
        self.sources += 1
        return offset

    def _flush(self, rows: int) -> None:
        gathered = pa.Table.from_batches(self._held, schema=self.schema)
        self._writer.write(gathered.slice(0, rows))
        rest = gathered.slice(rows)
        self._held, self._held_rows = rest.to_batches(), rest.num_rows

    def close(self) -> Any:
        """The file closed; its DataFile (in the first old file's partition and spec)."""
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

        if self._held_rows:
            self._flush(self._held_rows)
        with self._writer:
            pass
        statistics = self._writer.result()
        new = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=self.path,
            file_format=FileFormat.PARQUET,
            partition=self.first.partition,
            file_size_in_bytes=len(self.table.io.new_input(self.path)),
            # One old file's rows keep its order; several, one after the other, do not.
            sort_order_id=self.first.sort_order_id if self.sources == 1 else None,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )
        new.spec_id = self.first.spec_id  # not a field of the struct: set apart
        return new


def rewrite_data_file(
    table: Any, data_file: Any, deleted: np.ndarray, batch_rows: int = BATCH_ROWS
) -> Any | None:
    """`data_file` of `table` written again without the rows at `deleted` (sorted, unique);
    its new DataFile, or None when no row is left (nothing written)."""
    if len(deleted) >= data_file.record_count:
        return None
    with table.io.new_input(data_file.file_path).open() as stream:
        parquet = pq.ParquetFile(stream)
        new = NewDataFile(table, data_file, parquet.schema_arrow, batch_rows)
        new.add(parquet, data_file, deleted)
    return new.close()


def target_file_bytes(table: Any) -> int:
    from pyiceberg.table import TableProperties
    from pyiceberg.utils.properties import property_as_int

    return (
        property_as_int(
            table.metadata.properties,
            TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
            TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
        )
        or TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT
    )


def rewrite_files(
    table: Any, tasks: Sequence[Any], deletes: PositionDeletes, batch_rows: int = BATCH_ROWS
) -> list[RewrittenFile]:
    """The data files of `tasks` written again without their deleted rows, one at a time;
    the kept rows of the files of one partition (and one Arrow schema) gathered into new
    files of up to the table's target file size, in order (each old file's rows together),
    so the small files each batch adds do not pile up."""
    done: list[RewrittenFile] = []
    target = target_file_bytes(table)
    groups: dict[tuple[int, str], list[Any]] = {}
    for task in tasks:
        groups.setdefault((task.file.spec_id, repr(task.file.partition)), []).append(task)
    for group in groups.values():
        current: NewDataFile | None = None
        pending: list[tuple[Any, np.ndarray, int]] = []  # old file, deleted, offset

        def close() -> None:
            nonlocal current, pending
            if current is not None:
                new = current.close()
                done.extend(RewrittenFile(old, gone, new, at) for old, gone, at in pending)
            current, pending = None, []

        for task in group:
            deleted = _unique_sorted(deletes.of(task))
            if len(deleted) >= task.file.record_count:
                done.append(RewrittenFile(task.file, deleted, None))
                continue
            with table.io.new_input(task.file.file_path).open() as stream:
                parquet = pq.ParquetFile(stream)
                schema = parquet.schema_arrow
                if current is not None and (
                    current.bytes_estimate >= target or not current.schema.equals(schema)
                ):
                    close()
                if current is None:
                    current = NewDataFile(table, task.file, schema, batch_rows)
                offset = current.add(parquet, task.file, deleted)
            pending.append((task.file, deleted, offset))
        close()
    return done


def _unique_sorted(positions: np.ndarray) -> np.ndarray:
    return np.unique(positions.astype(np.int64, copy=False))


def apply_deletes(
    table: Any,
    *,
    indexes: IndexCache | None = INDEXES,
    before_commit: Callable[[], None] | None = None,
    batch_rows: int = BATCH_ROWS,
) -> ApplyDeletesResult:
    """Apply the position deletes of `table` (pyiceberg, loaded) to its data files (module
    docstring); `before_commit` runs right before the commit (the test crash point).

    Raises ApplyDeletesError when the table's deletes cannot be applied here or the
    branch moved during the rewrite (nothing committed, the new files deleted)."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    began = time.perf_counter()
    if table.metadata.format_version != 2:
        raise ApplyDeletesUnsupported(f"format version {table.metadata.format_version}")
    snapshot = table.metadata.current_snapshot()
    result = ApplyDeletesResult(snapshot.snapshot_id if snapshot is not None else None)
    if snapshot is None:
        return result
    tasks = files_with_deletes(table, snapshot.snapshot_id)
    if not tasks:
        return result
    deletes = PositionDeletes(table.io, ApplyDeletesError)
    delete_files = {d.file_path: d for task in tasks for d in task.delete_files}
    # Until the catalog is asked, a failure leaves the new files unreferenced: deleted. An
    # error from the commit itself deletes them only when the commit is known not to have
    # landed (refused, or refused on retry): any other outcome may reference them.
    asked = False
    try:
        result.files = rewrite_files(table, tasks, deletes, batch_rows)
        result.delete_files = len(delete_files)
        removed = [*(f.old for f in result.files), *delete_files.values()]
        added = list({f.new.file_path: f.new for f in result.files if f.new is not None}.values())
        transaction = transaction_of(table)
        with RewriteFiles(transaction, table.io, removed, added) as rewrite:
            pass
        if before_commit is not None:
            before_commit()
        asked = True
        transaction.commit_transaction()
    except (CommitFailedException, ValidationException) as exc:
        _delete_quietly(table.io, _new_paths(result))
        raise ApplyDeletesError(
            f"deletes not applied: the table changed during the rewrite ({exc})"
        ) from exc
    except BaseException:
        if not asked:
            _delete_quietly(table.io, _new_paths(result))
        raise
    result.snapshot_id = rewrite.snapshot_id
    if indexes is not None:
        result.index_remapped = remap_indexes(
            indexes, str(table.metadata.table_uuid), snapshot.snapshot_id, result
        )
    result.seconds = time.perf_counter() - began
    return result


def remap_indexes(
    indexes: IndexCache, table_uuid: str, base_snapshot_id: int, result: ApplyDeletesResult
) -> bool:
    """The table's key indexes kept by this process, moved onto the rewritten files when
    they are at the snapshot the rewrite started from (others are left: the next batch
    builds them). Whether one was remapped."""
    assert result.snapshot_id is not None
    moved = False
    for name, index in indexes.take_table(table_uuid):
        if isinstance(index, KeyIndex) and index.snapshot_id == base_snapshot_id:
            index.rewritten(
                result.snapshot_id,
                [
                    (f.old.file_path, f.new.file_path if f.new else None, f.offset, f.deleted)
                    for f in result.files
                ],
            )
            moved = True
        indexes.keep(name, index)
    return moved


def _new_paths(result: ApplyDeletesResult) -> list[str]:
    return sorted({f.new.file_path for f in result.files if f.new is not None})


def _delete_quietly(io: Any, paths: Sequence[str]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):  # else an orphan: remove_orphans takes it
            io.delete(path)


def driver_operation(catalog: Any, identifier: tuple[str, ...]) -> Operation:
    """`apply_deletes` as a maintenance operation (maintenance/operations.Operation) on
    the catalog's table `identifier`: Spark is not used, but for a table the driver does
    not rewrite (`ApplyDeletesUnsupported`: Spark's `rewrite_data_files` then, the
    operation's fallback)."""

    def run(spark: Any, target: Any, settings: Any, now: datetime) -> dict[str, Any]:
        table = catalog.load_table(identifier)
        try:
            done = apply_deletes(table, before_commit=lambda: crash_point(CRASH_BEFORE_COMMIT))
        except ApplyDeletesUnsupported as exc:
            metrics = OPERATIONS[APPLY_DELETES](spark, target, settings, now)
            return {**metrics, "by": "spark", "why": str(exc)[:200]}
        crash_point(CRASH_AFTER_COMMIT)
        return done.metrics()

    return run
