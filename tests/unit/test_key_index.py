"""The upsert key index (pipeline/key_index.py): built from data files' key columns and
their deleted positions, looked up, advanced by a batch's changes, against a dict model;
hashed keys and their collisions; rebuilt when the table moved by a foreign snapshot (a
pyiceberg SQLite catalog in a temporary directory, no process)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tableflow_core.pipeline.key_index import (
    DELETED,
    POSITION_BITS,
    IndexCache,
    KeyCodec,
    KeyCollision,
    KeyIndex,
    PendingIndex,
    bytes_per_key,
    file_of,
    find,
    position_of,
    unchanged_rows,
)
from tableflow_core.pipeline.upsert_rows import build_index_ahead, merge_batch
from tests.unit.test_upsert_rows import TABLE_SCHEMA

INT = KeyCodec((pa.int64(),))


def loc(ordinal: int, position: int) -> int:
    return (ordinal << POSITION_BITS) | position


def chunked(values: Sequence[Any], type_: pa.DataType = pa.int64()) -> pa.ChunkedArray:
    return pa.chunked_array([pa.array(values, type_)])


def test_build_leaves_out_deleted_positions_and_null_keys() -> None:
    files = [
        ("a.parquet", 10, [chunked([5, 3, 9, 7])], np.array([1])),  # 3 deleted
        ("b.parquet", None, [chunked([3, None, 11])], np.empty(0, np.int64)),
    ]
    index = KeyIndex.build(INT, 1, files)
    found = index.lookup((np.array([3, 5, 7, 9, 11, 4], dtype=np.int64),))
    assert found.tolist() == [loc(1, 0), loc(0, 0), loc(0, 3), loc(0, 2), loc(1, 2), DELETED]
    assert len(index) == 5 and index.files == ["a.parquet", "b.parquet"]
    assert index.timestamp_upper == [10, None]
    assert file_of(found[:2]).tolist() == [1, 0] and position_of(found[:2]).tolist() == [0, 0]
    assert bytes_per_key(INT.types) == 16 and index.nbytes == 5 * 16


def test_two_live_rows_of_one_key_refuse_the_index() -> None:
    files = [("a", None, [chunked([1, 2])], np.empty(0, np.int64))]
    files.append(("b", None, [chunked([2])], np.empty(0, np.int64)))
    with pytest.raises(KeyCollision, match="two live rows"):
        KeyIndex.build(INT, 1, files)


def test_advance_follows_a_dict_model_through_deltas_and_compactions() -> None:
    rng = random.Random(7)
    model: dict[int, int] = {}
    keys = rng.sample(range(10**9), 3000)
    index = KeyIndex.build(INT, 1, [("f0", None, [chunked(keys)], np.empty(0, np.int64))])
    index.delta_min = 200  # merged into the base every few batches
    model = {k: loc(0, i) for i, k in enumerate(keys)}
    for batch in range(1, 60):
        removed = rng.sample(sorted(model), 40)
        fresh = rng.sample(range(10**9), 30) + rng.sample(removed, 10)
        fresh = list(dict.fromkeys(k for k in fresh if k not in model or k in removed))
        index.advance(
            batch + 1,
            (np.array(removed, dtype=np.int64),),
            [(f"f{batch}", None, [chunked(fresh)])],
        )
        for k in removed:
            del model[k]
        model.update({k: loc(batch, i) for i, k in enumerate(fresh)})
        probe = [*rng.sample(sorted(model), 50), *removed, *rng.sample(range(10**9), 20)]
        expected = [model.get(k, DELETED) for k in probe]
        assert index.lookup((np.array(probe, dtype=np.int64),)).tolist() == expected
        assert index.snapshot_id == batch + 1 and len(index) == len(model)
    assert len(index.delta_locations) < 30 * 59, "the delta was merged into the base"
    index.compact()
    assert len(index.delta_locations) == 0 and len(index.base_locations) == len(model)


def test_string_and_two_column_keys_are_hashed() -> None:
    codec = KeyCodec((pa.string(), pa.int64()))
    assert not codec.integer and bytes_per_key(codec.types) == 24
    regions, ids = ["eu", "us", "eu", "ap"], [1, 1, 2, 1]
    files = [("a", None, [chunked(regions, pa.string()), chunked(ids)], np.empty(0, np.int64))]
    index = KeyIndex.build(codec, 1, files)
    found = index.lookup_columns(
        [pa.array(["us", "eu", "eu", "us"]), pa.array([1, 2, 3, 2], pa.int64())]
    )
    assert found.tolist() == [loc(0, 1), loc(0, 2), DELETED, DELETED]
    # a key's parts are length-prefixed: ("ab", "c") is not ("a", "bc")
    pair = KeyCodec((pa.string(), pa.string()))
    one = pair.encode([pa.array(["ab"]), pa.array(["c"])])
    other = pair.encode([pa.array(["a"]), pa.array(["bc"])])
    assert (one[0][0], one[1][0]) != (other[0][0], other[1][0])


def weak_hash(columns: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """A hash whose high word is the same for every key and whose low word is the key's
    length: collisions on purpose."""
    values = columns[0].to_pylist()
    high = np.zeros(len(values), dtype=np.uint64)
    return high, np.array([len(v) for v in values], dtype=np.uint64)


def test_hash_collisions_are_detected_not_guessed() -> None:
    codec = KeyCodec((pa.string(),), hasher=weak_hash)
    files = [("a", None, [chunked(["x", "yy", "zzz"], pa.string())], np.empty(0, np.int64))]
    index = KeyIndex.build(codec, 1, files)  # one high word shared by all: still exact
    found = index.lookup_columns([pa.array(["zzz", "x", "qqqq"])])
    assert found.tolist() == [loc(0, 2), loc(0, 0), DELETED]
    with pytest.raises(KeyCollision, match="batch share a hash"):
        index.lookup_columns([pa.array(["ab", "cd"])])
    clash = [("a", None, [chunked(["ab", "cd"], pa.string())], np.empty(0, np.int64))]
    with pytest.raises(KeyCollision):
        KeyIndex.build(codec, 1, clash)


def test_find_in_sorted_hashed_keys_with_shared_high_words() -> None:
    high = np.array([1, 1, 1, 2, 5], dtype=np.uint64)
    low = np.array([3, 4, 9, 0, 1], dtype=np.uint64)
    query = (np.array([1, 1, 2, 5, 3, 1], np.uint64), np.array([9, 5, 0, 1, 0, 3], np.uint64))
    assert find((high, low), query).tolist() == [2, -1, 3, 4, -1, 0]


def test_the_cache_drops_the_least_recently_used_over_its_budget(monkeypatch: Any) -> None:
    monkeypatch.setenv("TABLEFLOW_KEY_INDEX_MAX_BYTES", str(16 * 150))
    cache = IndexCache()
    for name in ("a", "b"):
        rows = [("f", None, [chunked(range(100))], np.empty(0, np.int64))]
        cache.keep((name, ("id",)), KeyIndex.build(INT, 1, rows))
    assert cache.take(("a", ("id",))) is None  # 2 x 1600 bytes > 2400: a went first
    assert cache.take(("b", ("id",))) is not None
    assert cache.take(("b", ("id",))) is None  # taken while a batch uses it


def test_a_pending_index_is_made_by_its_next_user_once() -> None:
    cache = IndexCache()
    made: list[int] = []
    rows = [("f", None, [chunked(range(10))], np.empty(0, np.int64))]

    def settle() -> KeyIndex | None:
        made.append(1)
        return KeyIndex.build(INT, 7, rows)

    cache.keep(("a", ("id",)), PendingIndex(settle, 160))
    assert made == []  # nothing made until a batch asks
    index = cache.take(("a", ("id",)))
    assert made == [1] and isinstance(index, KeyIndex) and index.snapshot_id == 7
    assert cache.take(("a", ("id",))) is None  # taken while a batch uses it
    # One that can no longer follow its table is no index: the user builds it again.
    cache.keep(("b", ("id",)), PendingIndex(lambda: None, 160))
    cache.keep(("c", ("id",)), PendingIndex(settle, 160))
    assert cache.take(("b", ("id",))) is None
    cache.keep(("b", ("id",)), PendingIndex(lambda: None, 160))
    assert [name for name, _ in cache.take_table("b")] == []
    assert [type(i) for _, i in cache.take_table("c")] == [KeyIndex] and made == [1, 1]


# The index inside the driver's merge: warm across batches, rebuilt after a foreign write.
def decoded(rows: list[tuple[int, int, int, str | None]]) -> pa.Table:
    """(key, offset, timestamp ms, value or None for a tombstone), partition 0."""
    from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
    from tableflow_core.ingest.columns import SOURCE_TIMESTAMP_COLUMN, TOMBSTONE_COLUMN

    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "name": pa.array([r[3] for r in rows], pa.string()),
            SOURCE_PARTITION_COLUMN: pa.array([0] * len(rows), pa.int32()),
            SOURCE_OFFSET_COLUMN: pa.array([r[1] for r in rows], pa.int64()),
            SOURCE_TIMESTAMP_COLUMN: pa.array([r[2] for r in rows], pa.int64()),
            TOMBSTONE_COLUMN: pa.array([r[3] is None for r in rows], pa.bool_()),
        }
    )


@pytest.fixture
def table(catalog: Any) -> Any:
    """An upsert table (ids, names and each row's record position) in the SQL catalog."""
    return catalog.create_table("ns.t", TABLE_SCHEMA, properties={"format-version": "2"})


def publish(table: Any, cache: IndexCache, rows: list[tuple[int, int, int, str | None]]) -> Any:
    from tableflow_core.engine.run_branch import publish_run

    table = table.refresh()
    base = table.metadata.current_snapshot_id
    if base is None:
        with table.transaction() as tx, tx.update_snapshot().fast_append():
            pass
        table = table.refresh()
        base = table.metadata.current_snapshot_id
    delta = merge_batch(table, base, decoded(rows), ("id",), lambda _c: None, {}, indexes=cache)
    snapshot = publish_run(
        table, base, "tableflow_run_test", {}, data_files=delta.data_files,
        delete_files=delta.delete_files, new_branch=True,
    )  # fmt: skip
    if delta.advance_index is not None:
        delta.advance_index(snapshot)
    return delta


def names(table: Any) -> dict[int, str]:
    rows = table.refresh().scan().to_arrow().to_pylist()
    assert len({r["id"] for r in rows}) == len(rows), "one row per key"
    return {r["id"]: r["name"] for r in rows}


def test_the_merge_keeps_the_index_warm_and_rebuilds_it_after_a_foreign_write(
    table: Any,
) -> None:
    cache = IndexCache()
    first = publish(table, cache, [(k, k, 1000, f"a{k}") for k in range(20)])
    assert "index_build" in first.timings, "built at the table's empty first snapshot"
    warm = publish(table, cache, [(k, 20 + k, 2000, f"b{k}") for k in range(0, 20, 2)])
    assert "index_build" not in warm.timings and warm.rows_deleted == 10
    second = publish(table, cache, [(1, 40, 3000, None), (2, 41, 3000, "c2"), (30, 42, 3000, "n")])
    assert "index_build" not in second.timings and "index_lookup" in second.timings
    uuid = str(table.refresh().metadata.table_uuid)
    # The publish left the index's move to the next user (a one-shot apply never pays it).
    assert isinstance(cache._indexes[(uuid, ("id",))], PendingIndex)
    warm = cache.take((uuid, ("id",)))
    assert warm is not None and warm.snapshot_id == table.refresh().metadata.current_snapshot_id
    cache.keep((uuid, ("id",)), warm)
    expected = {k: f"a{k}" for k in range(20)} | {k: f"b{k}" for k in range(0, 20, 2)}
    expected.pop(1)
    expected |= {2: "c2", 30: "n"}
    assert names(table) == expected
    # Another writer deletes key 4's row (a snapshot the index did not make): rebuilt.
    from pyiceberg.expressions import EqualTo

    table.refresh().delete(EqualTo("id", 4))
    expected.pop(4)
    third = publish(table, cache, [(4, 50, 900, "stale"), (5, 51, 4000, "d5")])
    assert "index_build" in third.timings
    # key 4's row is gone (no deletes table remembers it): the record is a new row
    assert names(table) == expected | {4: "stale", 5: "d5"}


def test_an_index_built_ahead_is_the_merges_and_a_failed_one_is_built_again(
    table: Any,
) -> None:
    cache = IndexCache()
    publish(table, cache, [(k, k, 1000, f"a{k}") for k in range(20)])
    cache.clear()  # a new process: no index
    table = table.refresh()
    base = table.metadata.current_snapshot_id
    build_index_ahead(table, base, ("id",), False, cache)
    assert cache.holds((str(table.metadata.table_uuid), ("id",)))
    build_index_ahead(table, base, ("id",), False, cache)  # held: nothing more
    ahead = publish(table, cache, [(k, 20 + k, 2000, f"b{k}") for k in range(0, 20, 2)])
    assert "index_build" not in ahead.timings and "index_lookup" in ahead.timings
    assert ahead.rows_deleted == 10
    # A build that fails (here: a snapshot the table does not have) is not the merge's:
    # the merge builds the index itself, at the right snapshot.
    cache.clear()
    build_index_ahead(table.refresh(), 123456789, ("id",), False, cache)
    again = publish(table, cache, [(1, 40, 3000, None), (30, 41, 3000, "n")])
    assert "index_build" in again.timings and again.rows_deleted == 1
    expected = {k: f"a{k}" for k in range(20)} | {k: f"b{k}" for k in range(0, 20, 2)}
    expected.pop(1)
    assert names(table) == expected | {30: "n"}


def test_only_a_delete_file_rewrite_since_the_index_keeps_it() -> None:
    class Summary(dict[str, str]):
        def __init__(self, operation: str, **values: str) -> None:
            super().__init__(values)
            self.operation = type("Op", (), {"value": operation})()

    class Snapshot:
        def __init__(self, sid: int, parent: int | None, summary: Summary) -> None:
            self.snapshot_id, self.parent_snapshot_id, self.summary = sid, parent, summary

    def table(*snapshots: Snapshot) -> Any:
        by_id = {s.snapshot_id: s for s in snapshots}
        metadata = type("M", (), {"snapshot_by_id": staticmethod(by_id.get)})()
        return type("T", (), {"metadata": metadata})()

    base = Snapshot(1, None, Summary("append"))
    rewrite = Snapshot(2, 1, Summary("replace", **{"removed-delete-files": "3"}))
    compact = Snapshot(3, 1, Summary("replace", **{"added-data-files": "1"}))
    foreign = Snapshot(4, 2, Summary("overwrite"))
    assert unchanged_rows(table(base, rewrite), 1, 2)
    assert not unchanged_rows(table(base, compact), 1, 3)
    assert not unchanged_rows(table(base, rewrite, foreign), 1, 4)
    assert not unchanged_rows(table(rewrite), 9, 2), "not a descendant"


def test_a_rewrite_of_files_without_their_deleted_rows_remaps_every_live_key() -> None:
    """`rewritten` against a model: of four files, two (one a delta's) copied into one new
    file without their deleted rows, one with every row deleted dropped, one left; each
    live key then where the new file holds it: its old file's offset in it plus its
    position less the deleted rows before it."""
    rng = random.Random(3)
    sizes = {"f0": 500, "f1": 300, "f2": 200}
    keys = rng.sample(range(10**6), sum(sizes.values()))
    files, live, start = [], {}, 0
    for path, size in sizes.items():
        part = keys[start : start + size]
        start += size
        gone = set(rng.sample(range(size), size // 5))
        deleted = np.array(sorted(gone), dtype=np.int64)
        files.append((path, 7, [chunked(part)], deleted))
        live[path] = [(i, k) for i, k in enumerate(part) if i not in gone]
    index = KeyIndex.build(INT, 1, files)
    index.advance(2, (np.empty(0, np.int64),), [("f3", None, [chunked([-1, -2, -3])])])
    f1_keys = np.array([k for _, k in live["f1"]], dtype=np.int64)
    index.advance(3, (np.array([-1, *f1_keys], dtype=np.int64),), [])  # f3's row 0, all of f1
    index.rewritten(
        4,
        [("f0", "g0", 0, files[0][3]), ("f3", "g0", len(live["f0"]), np.array([0], dtype=np.int64)),
         ("f1", None, 0, np.arange(300, dtype=np.int64)), ("gone", "x", 0, np.empty(0, np.int64))],
    )  # fmt: skip
    model = {k: ("g0", n) for n, (_, k) in enumerate(live["f0"])}
    model.update({k: ("f2", i) for i, k in live["f2"]})
    model.update({-2: ("g0", len(live["f0"])), -3: ("g0", len(live["f0"]) + 1)})
    probe = np.array([*sorted(model), -1, *f1_keys], dtype=np.int64)
    found = index.lookup((probe,))
    got = {
        int(k): (
            index.files[int(file_of(found[i : i + 1])[0])],
            int(position_of(found[i : i + 1])[0]),
        )
        for i, k in enumerate(probe[: len(model)])
    }
    assert got == model and index.snapshot_id == 4
    assert (found[len(model) :] == DELETED).all() and len(index) == len(model)
    # g0 holds f0's rows (upper 7) and f3's (unknown): its upper bound is unknown.
    assert index.timestamp_upper[index.files.index("g0")] is None
