"""An upsert table's key index: each live row's key -> (data file, row position).

The driver's merge (`pipeline/upsert_rows.py`) looks a batch's keys up here instead of
reading every data file's key column and every delete file: a batch's cost follows the
batch, not the table (docs/architecture.md, "The key index").

- A key is one 64-bit integer when the table has one integer key column (the value
  itself), else a 128-bit hash of the key's values (BLAKE2b, two uint64 arrays). Two
  different keys among n share a hash with probability about n^2 / 2^129 (1.5e-23 at
  100M keys); a shared hash is detected where it can be (two live rows, or two keys of a
  batch, with one hash: `KeyCollision`, the caller scans the table instead).
- A location is `file ordinal << 40 | row position` in one int64 (-1: the key's row was
  deleted): 16 bytes a key for an integer key, 24 for a hashed one (+ the lookup's and
  a build's temporary arrays, about as much again at build).
- Sorted arrays (`searchsorted`): a base, updated in place for keys it holds, and a small
  sorted delta of keys it lacks, merged into the base when it passes an eighth of it
  (an LSM tree of two levels).
- An index is at one snapshot of its table. `advance` moves it to the snapshot the
  caller's own commit made (the batch's deleted keys, the keys of the data files it
  added); a snapshot that only rewrote delete files (`replace`, no data file added or
  removed: rows and positions unchanged) moves it too; the driver's rewrite of the data
  files with deletes (pipeline/apply_deletes.py) remaps it onto the new files
  (`rewritten`); any other change (another writer, Spark's compaction) makes the caller
  build it again from the table (`index_for`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tableflow_core.engine.run_branch import snapshots_since
from tableflow_core.errors import IngestError

POSITION_BITS = 40  # rows of a data file: < 2^40; data files of a table: < 2^23
_POSITION_MASK = (1 << POSITION_BITS) - 1
DELETED = -1
# Driver memory the process's key indexes may hold (bytes; environment
# TABLEFLOW_KEY_INDEX_MAX_BYTES): 4 GiB = 268M integer keys or 178M hashed keys; a table
# needing more is merged by Spark's MERGE, and least recently used indexes are dropped.
DEFAULT_MAX_BYTES = 4 << 30
_INTEGER_TYPES = frozenset(
    [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32()]
)

Keys = tuple[np.ndarray, ...]  # (int64,) or (uint64 high, uint64 low)


class KeyCollision(IngestError):
    """Two different keys share a hash, or the table holds two live rows of one key: the
    index cannot say which row a key has; the caller reads the table instead."""


def max_bytes() -> int:
    """The key indexes' memory budget (TABLEFLOW_KEY_INDEX_MAX_BYTES, else 4 GiB)."""
    value = os.environ.get("TABLEFLOW_KEY_INDEX_MAX_BYTES")
    return int(value) if value else DEFAULT_MAX_BYTES


def is_integer_key(types: Sequence[pa.DataType]) -> bool:
    """One key column of an integer type that fits an int64: the key is its value."""
    return len(types) == 1 and types[0] in _INTEGER_TYPES


def bytes_per_key(types: Sequence[pa.DataType]) -> int:
    """Resident bytes of one key in the index (key words + location)."""
    return 16 if is_integer_key(types) else 24


def _hash_value(value: Any) -> bytes:
    if isinstance(value, bytes):
        return b"b" + len(value).to_bytes(8, "little") + value
    if isinstance(value, str):
        encoded = value.encode()
        return b"s" + len(encoded).to_bytes(8, "little") + encoded
    text = repr(value).encode()
    return b"r" + len(text).to_bytes(8, "little") + text


def hash128(columns: Sequence[pa.Array | pa.ChunkedArray]) -> Keys:
    """128-bit BLAKE2b of each row's key values (length-prefixed, type-tagged), as (high,
    low) uint64 arrays. Python per row: ~1 us a key."""
    rows = zip(*(c.to_pylist() for c in columns), strict=True)
    digest = b"".join(
        hashlib.blake2b(b"".join(_hash_value(v) for v in row), digest_size=16).digest()
        for row in rows
    )
    words = np.frombuffer(digest, dtype="<u8").reshape(-1, 2) if digest else np.empty((0, 2))
    return words[:, 0].astype(np.uint64), words[:, 1].astype(np.uint64)


@dataclass(frozen=True)
class KeyCodec:
    """How key columns become index keys: the column types the index was built for."""

    types: tuple[pa.DataType, ...]
    hasher: Callable[[Sequence[pa.Array | pa.ChunkedArray]], Keys] = hash128

    @property
    def integer(self) -> bool:
        return is_integer_key(self.types)

    def encode(self, columns: Sequence[pa.Array | pa.ChunkedArray]) -> Keys:
        """Index keys of the rows of `columns` (the key columns, in order, no nulls)."""
        if self.integer:
            (column,) = columns
            values = pc.cast(column, pa.int64())
            if isinstance(values, pa.ChunkedArray):
                values = values.combine_chunks()
            return (values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False),)
        typed = [pc.cast(c, t) for c, t in zip(columns, self.types, strict=True)]
        return self.hasher(typed)


def _order(keys: Keys) -> np.ndarray:
    if len(keys) == 1:
        return np.argsort(keys[0], kind="stable")
    return np.lexsort((keys[1], keys[0]))


def _strictly_increasing(keys: Keys) -> bool:
    """A one-word key sorted with no repeat (then its order is its own)."""
    return len(keys) == 1 and bool(np.all(keys[0][1:] > keys[0][:-1]))


def _take(keys: Keys, rows: np.ndarray) -> Keys:
    return tuple(k[rows] for k in keys)


def _duplicates(sorted_keys: Keys) -> np.ndarray:
    """Rows of sorted keys equal to the row before."""
    same = np.ones(max(len(sorted_keys[0]) - 1, 0), dtype=bool)
    for words in sorted_keys:
        same &= words[1:] == words[:-1]
    return np.flatnonzero(same) + 1


def find(sorted_keys: Keys, query: Keys) -> np.ndarray:
    """Row of `sorted_keys` (sorted, unique) holding each query key, or -1."""
    primary = sorted_keys[0]
    n = len(primary)
    left = np.searchsorted(primary, query[0], "left")
    found = np.full(len(query[0]), -1, dtype=np.int64)
    inside = left < n
    hit = np.zeros(len(query[0]), dtype=bool)
    hit[inside] = primary[left[inside]] == query[0][inside]
    if len(sorted_keys) == 1:
        found[hit] = left[hit]
        return found
    # Hashed keys: the low word decides; a high word shared by several keys (~n^2/2^65
    # pairs) is searched among them.
    right = np.searchsorted(primary, query[0], "right")
    span = right - left
    single = hit & (span == 1)
    single_rows = np.flatnonzero(single)
    same_low = sorted_keys[1][left[single_rows]] == query[1][single_rows]
    found[single_rows[same_low]] = left[single_rows[same_low]]
    for row in np.flatnonzero(hit & (span > 1)):
        low = sorted_keys[1][left[row] : right[row]]
        at = int(np.searchsorted(low, query[1][row]))
        if at < len(low) and low[at] == query[1][row]:
            found[row] = left[row] + at
    return found


@dataclass
class KeyIndex:
    """Key -> location of every live row of a table at `snapshot_id` (module docstring)."""

    codec: KeyCodec
    snapshot_id: int
    files: list[str] = field(default_factory=list)  # ordinal -> data file path
    timestamp_upper: list[int | None] = field(default_factory=list)  # per file, epoch micros
    base_keys: Keys = ()
    base_locations: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    delta_keys: Keys = ()
    delta_locations: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    _ordinals: dict[str, int] = field(default_factory=dict)
    delta_min: int = 1 << 17  # keys the delta may hold whatever the base's size

    @classmethod
    def build(
        cls,
        codec: KeyCodec,
        snapshot_id: int,
        files: Iterable[tuple[str, int | None, Sequence[pa.ChunkedArray], np.ndarray]],
    ) -> KeyIndex:
        """The index of a table's live rows: `files` gives each data file's path, its
        `_kafka_timestamp` upper bound, its key columns and the positions its delete
        files removed. Rows with a null key are left out (no batch key matches them).
        KeyCollision when two live rows share a key."""
        index = cls(codec, snapshot_id)
        parts: list[Keys] = []
        locations: list[np.ndarray] = []
        for path, upper, columns, deleted in files:
            ordinal = index._ordinal(path, upper)
            live = np.ones(len(columns[0]) if columns else 0, dtype=bool)
            live[deleted[deleted < len(live)]] = False
            for column in columns:
                if column.null_count:
                    live &= column.is_valid().to_numpy(zero_copy_only=False)
            rows = np.flatnonzero(live)
            if len(rows) == 0:
                continue
            if len(rows) != len(live):
                columns = [c.take(pa.array(rows)) for c in columns]
            parts.append(codec.encode(columns))
            locations.append((np.int64(ordinal) << POSITION_BITS) | rows.astype(np.int64))
        width = 1 if codec.integer else 2
        keys = tuple(
            np.concatenate([p[i] for p in parts])
            if parts
            else np.empty(0, np.int64 if codec.integer else np.uint64)
            for i in range(width)
        )
        located = np.concatenate(locations) if locations else np.empty(0, np.int64)
        parts.clear()  # peak memory: the keys and locations twice, and the sort's order
        locations.clear()
        index._set_base(keys, located)
        return index

    @classmethod
    def of_rows(
        cls,
        codec: KeyCodec,
        snapshot_id: int,
        files: Sequence[tuple[str, int | None]],
        columns: Sequence[pa.Array | pa.ChunkedArray],
        locations: np.ndarray,
    ) -> KeyIndex:
        """The index of live rows given directly: their key columns and locations
        (`files`' ordinal << POSITION_BITS | row; `files`: path and timestamp upper bound
        of each data file). KeyCollision when two rows share a key."""
        index = cls(codec, snapshot_id)
        for path, upper in files:
            index._ordinal(path, upper)
        index._set_base(codec.encode(columns), locations)
        return index

    def _set_base(self, keys: Keys, locations: np.ndarray) -> None:
        """The base: `keys` (one per live row, any order) sorted, with their locations."""
        if not _strictly_increasing(keys):  # a first load's live rows come so: no sort
            order = _order(keys)
            keys = _take(keys, order)
            locations = locations[order]
            del order
            if len(_duplicates(keys)):
                raise KeyCollision(
                    f"{len(_duplicates(keys))} key(s) of the table have two live rows "
                    "(or share a hash)"
                )
        self.base_keys, self.base_locations = keys, locations
        self.delta_keys = tuple(np.empty(0, k.dtype) for k in keys)
        self.delta_locations = np.empty(0, np.int64)

    def _ordinal(self, path: str, upper: int | None) -> int:
        ordinal = self._ordinals.get(path)
        if ordinal is None:
            ordinal = len(self.files)
            self.files.append(path)
            self.timestamp_upper.append(upper)
            self._ordinals[path] = ordinal
        return ordinal

    def __len__(self) -> int:
        """Live keys."""
        live = int(np.count_nonzero(self.base_locations != DELETED))
        return live + int(np.count_nonzero(self.delta_locations != DELETED))

    @property
    def nbytes(self) -> int:
        words = sum(k.nbytes for k in (*self.base_keys, *self.delta_keys))
        return words + self.base_locations.nbytes + self.delta_locations.nbytes

    def lookup(self, keys: Keys) -> np.ndarray:
        """Location of each key's live row, or DELETED (-1) when the table has none."""
        found = np.full(len(keys[0]), DELETED, dtype=np.int64)
        in_delta = find(self.delta_keys, keys)
        hit = in_delta >= 0
        found[hit] = self.delta_locations[in_delta[hit]]
        rest = np.flatnonzero(~hit)
        in_base = find(self.base_keys, _take(keys, rest))
        base_hit = in_base >= 0
        found[rest[base_hit]] = self.base_locations[in_base[base_hit]]
        return found

    def lookup_columns(self, columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
        """`lookup` of key columns (a batch's, one row per key). KeyCollision when two of
        them share a hash."""
        keys = self.codec.encode(columns)
        if not self.codec.integer and len(_duplicates(_take(keys, _order(keys)))):
            raise KeyCollision("two keys of the batch share a hash")
        return self.lookup(keys)

    def set(self, keys: Keys, locations: np.ndarray) -> None:
        """Keys' rows are now at `locations` (DELETED: removed): in place where the base or
        the delta holds the key, else added to the delta (unique keys)."""
        in_base = find(self.base_keys, keys)
        held = in_base >= 0
        self.base_locations[in_base[held]] = locations[held]
        rest = np.flatnonzero(~held)
        if len(rest) == 0:
            return
        keys, locations = _take(keys, rest), locations[rest]
        in_delta = find(self.delta_keys, keys)
        held = in_delta >= 0
        self.delta_locations[in_delta[held]] = locations[held]
        new = np.flatnonzero(~held & (locations != DELETED))
        if len(new) == 0:
            return
        merged = tuple(
            np.concatenate([d, k[new]]) for d, k in zip(self.delta_keys, keys, strict=True)
        )
        merged_locations = np.concatenate([self.delta_locations, locations[new]])
        order = _order(merged)
        self.delta_keys, self.delta_locations = _take(merged, order), merged_locations[order]
        if len(self.delta_locations) > max(len(self.base_locations) // 8, self.delta_min):
            self.compact()

    def compact(self) -> None:
        """The delta merged into the base, deleted keys dropped (O(table))."""
        keys = tuple(np.concatenate(p) for p in zip(self.base_keys, self.delta_keys, strict=True))
        locations = np.concatenate([self.base_locations, self.delta_locations])
        live = np.flatnonzero(locations != DELETED)
        keys, locations = _take(keys, live), locations[live]
        order = _order(keys)
        self.base_keys, self.base_locations = _take(keys, order), locations[order]
        self.delta_keys = tuple(np.empty(0, k.dtype) for k in keys)
        self.delta_locations = np.empty(0, np.int64)

    def advance(
        self,
        snapshot_id: int,
        removed: Keys,
        added: Iterable[tuple[str, int | None, Sequence[pa.ChunkedArray]]],
    ) -> None:
        """The index moved to `snapshot_id`, a commit on top of its snapshot that deleted
        the rows of keys `removed` and added data files `added` (path, timestamp upper
        bound, key columns: every row live)."""
        if len(removed[0]) if removed else 0:
            self.set(removed, np.full(len(removed[0]), DELETED, dtype=np.int64))
        for path, upper, columns in added:
            ordinal = self._ordinal(path, upper)
            keys = self.codec.encode(columns)
            rows = np.arange(len(keys[0]), dtype=np.int64)
            self.set(keys, (np.int64(ordinal) << POSITION_BITS) | rows)
        self.snapshot_id = snapshot_id

    def rewritten(
        self, snapshot_id: int, files: Iterable[tuple[str, str | None, int, np.ndarray]]
    ) -> None:
        """The index moved to `snapshot_id`, a commit on top of its snapshot that replaced
        data files by new ones holding their rows less the deleted ones (old path; new
        path, None when no row was left; the row of the new file the old one's first kept
        row is at; the old file's deleted positions, sorted): each live row's location
        moved to its new file, at that row plus its position less the deleted rows before
        it (pipeline/apply_deletes.py). A new file's timestamp upper bound is the largest
        of its old files' (unknown if one is)."""
        moves: list[tuple[int, str, int, np.ndarray]] = []
        uppers: dict[str, list[int | None]] = {}
        for old_path, new_path, offset, deleted in files:
            ordinal = self._ordinals.get(old_path)
            if ordinal is None or new_path is None:
                continue  # not indexed, or no live row left in it
            moves.append((ordinal, new_path, offset, deleted))
            uppers.setdefault(new_path, []).append(self.timestamp_upper[ordinal])
        new_ordinal = np.arange(len(self.files), dtype=np.int64)
        offsets = np.zeros(len(self.files), dtype=np.int64)
        removed: list[np.ndarray] = []
        for old, new, offset, deleted in moves:
            found = uppers[new]
            upper = None if None in found else max(u for u in found if u is not None)
            new_ordinal[old] = self._ordinal(new, upper)
            offsets[old] = offset
            removed.append((np.int64(old) << POSITION_BITS) | deleted.astype(np.int64))
        # Every deleted row of every rewritten file, as locations, sorted: a live row's
        # shift is how many of its own file's are before it.
        gone = np.sort(np.concatenate(removed)) if removed else np.empty(0, np.int64)
        for locations in (self.base_locations, self.delta_locations):
            for start in range(0, len(locations), _REMAP_CHUNK):
                part = locations[start : start + _REMAP_CHUNK]
                live = np.flatnonzero(part != DELETED)
                at = part[live]
                ordinals = file_of(at)
                before = np.searchsorted(gone, at) - np.searchsorted(
                    gone, ordinals << POSITION_BITS
                )
                part[live] = (new_ordinal[ordinals] << POSITION_BITS) | (
                    offsets[ordinals] + position_of(at) - before
                )
        self.snapshot_id = snapshot_id


# Locations remapped at a time by `KeyIndex.rewritten` (bounds its temporary arrays).
_REMAP_CHUNK = 1 << 22


def file_of(locations: np.ndarray) -> np.ndarray:
    """Data file ordinal of each location."""
    return locations >> POSITION_BITS


def position_of(locations: np.ndarray) -> np.ndarray:
    """Row position (in its data file) of each location."""
    return locations & _POSITION_MASK


def unchanged_rows(table: Any, since: int, to: int) -> bool:
    """`to` descends from `since` by snapshots that only rewrote delete files (operation
    `replace`, no data file added or removed): the same rows at the same positions."""
    between = snapshots_since(table, since, to)
    return between is not None and all(_rewrote_deletes_only(s) for s in between)


def _rewrote_deletes_only(snapshot: Any) -> bool:
    summary = snapshot.summary
    if summary is None or summary.operation.value != "replace":
        return False
    names = ("added-data-files", "deleted-data-files", "added-records")
    return not any(int(summary.get(name) or 0) for name in names)


def _row_values(columns: Sequence[pa.Array | pa.ChunkedArray], rows: np.ndarray) -> list[tuple]:
    taken = [c.take(pa.array(rows, pa.int64())).to_pylist() for c in columns]
    return list(zip(*taken, strict=True))


@dataclass
class KeySet:
    """The keys a table's rows hold at `snapshot_id`, membership only: what an append
    table's `dedup` against the table asks (pipeline/dedup_index.py). 8 bytes a key for an
    integer key, 16 for a hashed one; the same sorted base + delta as KeyIndex.

    NULL keys: a hashed key hashes NULL like any value (a NULL matches a NULL, as Spark's
    null-safe join did); for an integer key `has_null` says whether some row's key is NULL.
    Exactness: an integer key is exact. Two different hashed keys share a hash with
    probability ~n*m/2^128 (a batch of m keys against n); a shared hash that can be seen
    (two rows of the table, at a build or added since, or two different keys of a
    batch, with one hash) is KeyCollision: the caller anti-joins the table instead."""

    codec: KeyCodec
    snapshot_id: int
    base: Keys = ()
    delta: Keys = ()
    has_null: bool = False
    delta_min: int = 1 << 17

    @classmethod
    def build(
        cls, codec: KeyCodec, snapshot_id: int, parts: Iterable[Sequence[pa.ChunkedArray]]
    ) -> KeySet:
        """The set of the key columns' rows (`parts`: each data file's live rows).
        KeyCollision when two rows share a hash (a hashed key: the table holds a key twice,
        or two keys share a hash; an integer key may repeat)."""
        keys: list[Keys] = []
        has_null = False
        for columns in parts:
            encoded, nulls = _encode_with_nulls(codec, columns)
            has_null = has_null or nulls
            keys.append(encoded)
        width = 1 if codec.integer else 2
        dtype = np.int64 if codec.integer else np.uint64
        joined = tuple(
            np.concatenate([k[i] for k in keys]) if keys else np.empty(0, dtype)
            for i in range(width)
        )
        keys.clear()
        ordered = _take(joined, _order(joined))
        del joined
        repeated = _duplicates(ordered)
        if len(repeated):
            if not codec.integer:
                raise KeyCollision(
                    f"{len(repeated)} hashed key(s) of the table repeat (a key held twice, "
                    "or two keys sharing a hash)"
                )
            ordered = _take(ordered, np.setdiff1d(np.arange(len(ordered[0])), repeated))
        empty = tuple(np.empty(0, k.dtype) for k in ordered)
        return cls(codec, snapshot_id, ordered, empty, has_null)

    def __len__(self) -> int:
        return len(self.base[0]) + len(self.delta[0]) if self.base else 0

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes for k in (*self.base, *self.delta))

    def contains(self, columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
        """Whether the set holds each row's key (the key columns of a batch's rows).
        KeyCollision when two different keys of the rows share a hash."""
        keys, null = self._encode_rows(columns)
        if not self.codec.integer:
            order = _order(keys)
            repeated = _duplicates(_take(keys, order))
            if len(repeated):
                first, second = order[repeated - 1], order[repeated]
                if _row_values(columns, first) != _row_values(columns, second):
                    raise KeyCollision("two keys of the batch share a hash")
        held = (find(self.delta, keys) >= 0) | (find(self.base, keys) >= 0)
        if null is None:
            return held
        found = np.full(len(null), self.has_null, dtype=bool)
        found[~null] = held
        return found

    def add(self, columns: Sequence[pa.Array | pa.ChunkedArray]) -> None:
        """Rows of these keys were added to the table (an append's data file)."""
        keys, null = self._encode_rows(columns)
        if null is not None and null.any():
            self.has_null = True
        new = (find(self.delta, keys) < 0) & (find(self.base, keys) < 0)
        if not self.codec.integer and not new.all():  # as `build`: the caller rebuilds
            raise KeyCollision("a hashed key added to the table is in it already")
        if not new.any():
            return
        merged = tuple(np.concatenate([d, k[new]]) for d, k in zip(self.delta, keys, strict=True))
        order = _order(merged)
        merged = _take(merged, order)
        repeated = _duplicates(merged)
        if len(repeated):  # a key twice among the added rows: once in the set
            if not self.codec.integer:
                raise KeyCollision("a hashed key repeats among the rows added to the table")
            merged = _take(merged, np.setdiff1d(np.arange(len(merged[0])), repeated))
        self.delta = merged
        if len(self.delta[0]) > max(len(self.base[0]) // 8, self.delta_min):
            joined = tuple(np.concatenate(p) for p in zip(self.base, self.delta, strict=True))
            self.base = _take(joined, _order(joined))
            self.delta = tuple(np.empty(0, k.dtype) for k in self.base)

    def _encode_rows(
        self, columns: Sequence[pa.Array | pa.ChunkedArray]
    ) -> tuple[Keys, np.ndarray | None]:
        """Keys of the rows; for an integer key, the keys of the non-NULL rows and which
        rows are NULL (None for a hashed key: NULL is hashed)."""
        if not self.codec.integer:
            return self.codec.encode(columns), None
        (column,) = columns
        null = column.is_null().to_numpy(zero_copy_only=False)
        if isinstance(null, np.ndarray) and null.any():
            valid = column.filter(pa.array(~null))
            return self.codec.encode([valid]), null
        return self.codec.encode([column]), null


def _encode_with_nulls(
    codec: KeyCodec, columns: Sequence[pa.Array | pa.ChunkedArray]
) -> tuple[Keys, bool]:
    """A build's keys of `columns`: an integer key's NULL rows left out (and said)."""
    if not codec.integer:
        return codec.encode(columns), False
    (column,) = columns
    if column.null_count:
        return codec.encode([pc.drop_null(column)]), True
    return codec.encode([column]), False


@dataclass(frozen=True)
class PendingIndex:
    """A key index whose move to its table's newest snapshot is left to its next user:
    a one-shot `tableflow apply` never pays for an index no batch of it will use, and a
    `tableflow run` pays it at its next batch (or maintenance) instead of after this one.
    `settle()` gives the index, or None when it can no longer follow its table (the user
    builds it again from the table); `nbytes`: the index's size, for the cache's budget."""

    settle: Callable[[], KeyIndex | None]
    nbytes: int


Held = KeyIndex | KeySet | PendingIndex


def _settled(held: Held | None) -> KeyIndex | KeySet | None:
    return held.settle() if isinstance(held, PendingIndex) else held


def index_name(table: Any, keys: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """The name a table's key index is kept by in an IndexCache: its uuid and key columns."""
    return (str(table.metadata.table_uuid), tuple(keys))


class IndexCache:
    """The process's key indexes and key sets (warm across a `tableflow run`'s batches), by
    table uuid and key columns, within `max_bytes()`: the least recently used go first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._indexes: OrderedDict[tuple[str, tuple[str, ...]], Held] = OrderedDict()

    def take(self, name: tuple[str, tuple[str, ...]]) -> Any:
        """The table's index (a KeyIndex, or a KeySet by the name its user gives), removed
        from the cache while a batch uses it (put back by `keep` once the batch is
        published); a pending one settled first (outside the lock)."""
        with self._lock:
            held = self._indexes.pop(name, None)
        return _settled(held)

    def holds(self, name: tuple[str, tuple[str, ...]]) -> bool:
        with self._lock:
            return name in self._indexes

    def keep(self, name: tuple[str, tuple[str, ...]], index: Held) -> None:
        with self._lock:
            self._indexes[name] = index
            budget = max_bytes()
            while self._indexes and sum(i.nbytes for i in self._indexes.values()) > budget:
                self._indexes.popitem(last=False)

    def take_table(self, table_uuid: str) -> list[tuple[tuple[str, tuple[str, ...]], Any]]:
        """Every index of the table (by its uuid), removed from the cache and settled as
        `take` does (one that can no longer follow its table left out)."""
        with self._lock:
            names = [name for name in self._indexes if name[0] == table_uuid]
            taken = [(name, self._indexes.pop(name)) for name in names]
        settled = [(name, _settled(held)) for name, held in taken]
        return [(name, index) for name, index in settled if index is not None]

    def clear(self) -> None:
        with self._lock:
            self._indexes.clear()


INDEXES = IndexCache()
