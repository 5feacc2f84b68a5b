"""Dedup inside a read task, and digests of keys, on Arrow (see
`pipeline/transforms/read_task_dedup.py` for when the dedup runs there, `pipeline/task_keys.py`
for what a task reports).

This module is what Spark's Python workers import to deduplicate: pyarrow, numpy and
pandas only (Spark's Arrow path imports them already), never the transform compiler.

A decode task that runs the table's dedup buffers its decoded batches (one range of at
most `max_records_per_task` records, or a few small ranges), flags every good row that loses to a later (keep
last) or earlier (keep first) row of the same key by (partition, offset) in the task,
and adds the flags as the hidden column `__tf_duplicate`. Flagged rows still leave the
task, so the decode stage counts every record it read; Spark drops them right after.

Digests of keys tell the driver whether two tasks kept one key (or two rows share one).
They are exact for one integer-like key column (a bijection of its 64 bits); other keys
are hashed, and two keys that collide only ever count as one repeated key, which sends
the run to the exact path, never the other way round.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.ingest.columns import DUPLICATE_COLUMN, good_row_mask
from tableflow_core.transforms.key_types import integer_like

Digests = Any  # a numpy uint64 array

# What a read task does for the table's dedup.
TaskDedupMode = Literal["dedup", "report"]


@dataclass(frozen=True)
class TaskDedup:
    """The dedup a decode task runs ("dedup": flag losers and report the kept keys) or
    only reports keys for ("report": Spark's shuffle dedups the batch)."""

    keys: tuple[str, ...]
    keep: Literal["first", "last"]
    mode: TaskDedupMode

    @property
    def flags(self) -> bool:
        return self.mode == "dedup"


def flag_duplicates(
    batches: Iterable[pa.RecordBatch], dedup: TaskDedup, schema: pa.Schema, chunk_rows: int
) -> tuple[list[pa.RecordBatch], pa.Table, Digests]:
    """One task's decoded batches (`schema`) with the `__tf_duplicate` flags added, the
    good rows it keeps, and the distinct digests of their keys. Reads every batch first:
    a row loses only once the task has read its key's last row.

    When no two good rows share a digest, no two share a key, and nothing is flagged
    without grouping the keys (the common case: 250,000 integer keys took ~5 ms to digest
    and sort against ~35 ms to sort by position and group)."""
    table = pa.Table.from_batches(list(batches), schema=schema)
    good = good_row_mask(table).to_numpy(zero_copy_only=False)
    good_rows = table if good.all() else table.filter(pa.array(good))
    digests = distinct(row_digests(good_rows, dedup.keys))
    if len(digests) == good_rows.num_rows:
        duplicate = np.zeros(table.num_rows, dtype=bool)
        kept = good_rows
    else:
        duplicate = duplicate_flags(table, dedup.keys, dedup.keep, good)
        kept = table.filter(pa.array(good & ~duplicate))
        digests = key_digests(kept, dedup.keys)
    field = pa.field(DUPLICATE_COLUMN, pa.bool_(), nullable=False)
    flagged = table.append_column(field, pa.array(duplicate))
    return flagged.to_batches(max_chunksize=chunk_rows), kept, digests


def duplicate_flags(
    table: pa.Table, keys: Sequence[str], keep: Literal["first", "last"], good: Any
) -> Any:
    """True on each good row (`good`: bool per row) that is not its key's first or last
    row by (partition, offset) in `table`; False elsewhere. NULL keys group together."""
    n = table.num_rows
    flags = np.zeros(n, dtype=bool)
    if not good.any():
        return flags
    order = pc.sort_indices(
        table,
        sort_keys=[(SOURCE_PARTITION_COLUMN, "ascending"), (SOURCE_OFFSET_COLUMN, "ascending")],
    ).to_numpy()
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    rows = np.flatnonzero(good)
    candidates = (
        table.select(list(keys)).take(pa.array(rows)).append_column("__rank", pa.array(rank[rows]))
    )
    winners = candidates.group_by(list(keys), use_threads=False).aggregate(
        [("__rank", "max" if keep == "last" else "min")]
    )
    if winners.num_rows == len(rows):  # every key once: nothing to flag
        return flags
    flags[rows] = True
    flags[order[winners.column(winners.num_columns - 1).to_numpy()]] = False
    return flags


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_NULL_DIGEST = np.uint64(0x6A09E667F3BCC909)


def _mix(x: Any) -> Any:
    """splitmix64's finalizer: a bijection of 64-bit words (no two inputs collide)."""
    with np.errstate(over="ignore"):
        x = x + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def row_digests(table: pa.Table, keys: Sequence[str], skip_all_null: bool = False) -> Digests:
    """A 64-bit digest of each row's key (`skip_all_null`: rows whose key columns are all
    NULL are left out)."""
    combined: Any = None
    present: Any = None
    for position, name in enumerate(keys):
        column = table.column(name)
        digest = _column_digest(column)
        if skip_all_null:
            valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
            present = valid if present is None else present | valid
        if combined is None:
            combined = digest
        else:
            with np.errstate(over="ignore"):
                combined = _mix(combined * np.uint64(31) + digest + np.uint64(position))
    if combined is None:
        return np.empty(0, dtype=np.uint64)
    return combined[present] if present is not None else combined


def key_digests(table: pa.Table, keys: Sequence[str]) -> Digests:
    """One 64-bit digest per distinct key of `table` (sorted, unique; NULL keys too)."""
    return distinct(row_digests(table, keys))


def distinct(digests: Digests) -> Digests:
    """The distinct values of `digests`, sorted. `np.unique` took ~30 times as long as
    the sort it needs (250,000 digests: 56 ms against 1.7 ms with numpy's vectorized
    sort)."""
    ordered = np.sort(digests)
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def _column_digest(column: pa.ChunkedArray) -> Any:
    data_type = column.type
    valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
    if integer_like(data_type):
        words = _as_words(column)
        digest = _mix(words)
    else:
        import pandas as pd

        values = column.cast(pa.string()) if pa.types.is_decimal(data_type) else column
        objects = values.to_numpy(zero_copy_only=False)
        digest = pd.util.hash_array(objects, categorize=False).astype(np.uint64, copy=False)
    return np.where(valid, digest, _NULL_DIGEST)


def _as_words(column: pa.ChunkedArray) -> Any:
    """The column's values as uint64 words, nulls as 0 (the same type in every task, so
    equal values give equal words)."""
    data_type = column.type
    if pa.types.is_boolean(data_type):
        column = column.cast(pa.int8())
    elif not pa.types.is_integer(data_type):
        width = pa.int32() if data_type.bit_width == 32 else pa.int64()
        column = pa.chunked_array([chunk.view(width) for chunk in column.chunks], width)
    column = column.fill_null(0)
    return column.cast(pa.uint64(), safe=False).to_numpy()


def keys_in_several_tasks(reports: Mapping[int, Digests]) -> int:
    """How many key digests more than one task reported (each task's are unique)."""
    parts = [np.asarray(d, dtype=np.uint64) for d in reports.values() if len(d)]
    if len(parts) < 2:
        return 0
    merged = np.sort(np.concatenate(parts))
    repeated = merged[1:] == merged[:-1]
    if not repeated.any():
        return 0
    return int(distinct(merged[1:][repeated]).size)
