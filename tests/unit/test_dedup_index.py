"""An append table's dedup key set (pipeline/key_index.KeySet, pipeline/dedup_index.py):
membership against a set model, NULL keys, hashed keys and their collisions, and the set
of a real Iceberg table (a pyiceberg SQLite catalog in a temporary directory, no
process): built, moved by appends, kept through a rewrite, rebuilt after a delete."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.expressions import EqualTo

from tableflow_core.pipeline import dedup_index
from tableflow_core.pipeline.dedup_index import indexable, keep_key_set, key_set_at
from tableflow_core.pipeline.key_index import IndexCache, KeyCodec, KeyCollision, KeySet
from tests.unit.test_key_index import weak_hash

INT = KeyCodec((pa.int64(),))
TEXT = KeyCodec((pa.string(),))
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])


def chunked(values: Sequence[Any], type_: pa.DataType = pa.int64()) -> pa.ChunkedArray:
    return pa.chunked_array([pa.array(values, type_)])


def test_an_integer_set_answers_like_a_python_set_through_adds_and_merges() -> None:
    rng = random.Random(7)
    model = set(rng.sample(range(10_000), 3_000))
    keys = sorted(model)
    key_set = KeySet.build(INT, 1, [[chunked(keys[:1000])], [chunked(keys[1000:] + keys[:5])]])
    key_set.delta_min = 100  # merges the delta into the base on the way
    for _ in range(20):
        batch = [rng.randrange(12_000) for _ in range(300)]
        found = key_set.contains([pa.array(batch)])
        assert found.tolist() == [k in model for k in batch]
        new = [k for k in batch if k not in model]
        key_set.add([pa.array(new + new[:3])])  # a file may repeat a key
        model.update(new)
    assert len(key_set) == len(model) and key_set.nbytes == 8 * len(model)


def test_a_null_key_matches_a_null_key() -> None:
    key_set = KeySet.build(INT, 1, [[chunked([1, 2])]])
    assert key_set.contains([pa.array([None, 1, 3])]).tolist() == [False, True, False]
    key_set.add([pa.array([None, 3])])
    assert key_set.contains([pa.array([None, 1, 3, 4])]).tolist() == [True, True, True, False]
    assert KeySet.build(INT, 1, [[chunked([None, 5])]]).has_null
    pair = KeyCodec((pa.string(), pa.int64()))
    both = KeySet.build(pair, 1, [[chunked(["a", "a"], pa.string()), chunked([None, 1])]])
    found = both.contains([pa.array(["a", "a", "None"]), pa.array([None, 2, None])])
    assert found.tolist() == [True, False, False]  # NULL is not the text "None"


def test_hashed_keys_and_their_collisions_are_seen_not_guessed() -> None:
    key_set = KeySet.build(TEXT, 1, [[chunked(["x", "yy"], pa.string())]])
    assert key_set.contains([pa.array(["yy", "zz", "x"])]).tolist() == [True, False, True]
    weak = KeyCodec((pa.string(),), hasher=weak_hash)  # the length is the hash
    with pytest.raises(KeyCollision, match="repeat"):
        KeySet.build(weak, 1, [[chunked(["ab", "cd"], pa.string())]])
    held = KeySet.build(weak, 1, [[chunked(["ab"], pa.string())]])
    with pytest.raises(KeyCollision, match="batch share a hash"):
        held.contains([pa.array(["xy", "zw"])])
    # the same key twice in a batch is no collision
    assert held.contains([pa.array(["ab", "ab", "q"])]).tolist() == [True, True, False]


def test_key_types_that_hash_exactly() -> None:
    assert indexable([pa.int32(), pa.string(), pa.date32(), pa.timestamp("us", "UTC")])
    assert indexable([pa.decimal128(10, 2), pa.binary(), pa.bool_()])
    assert not indexable([pa.float64()])
    assert not indexable([pa.timestamp("ns")])
    assert not indexable([pa.struct([pa.field("a", pa.int64())])])


def append(table: Any, ids: Sequence[int | None]) -> Any:
    names = [f"n{i}" for i in ids]
    table.append(pa.table([pa.array(ids, pa.int64()), pa.array(names)], schema=SCHEMA))
    return table.refresh()


def at_main(table: Any, cache: IndexCache) -> KeySet | None:
    timings: dict[str, float] = {}
    key_set = key_set_at(table, table.current_snapshot().snapshot_id, ["id"], indexes=cache,
                         timings=timings)  # fmt: skip
    if key_set is not None:
        keep_key_set(table, ["id"], key_set, cache)
        key_set.built = "dedup_index_build" in timings  # type: ignore[attr-defined]
    return key_set


def test_the_set_of_a_table_follows_appends_and_rewrites_and_is_rebuilt_after_a_delete(
    catalog: Any,
) -> None:
    table = catalog.create_table("ns.t", SCHEMA, properties={"format-version": "2"})
    cache = IndexCache()
    table = append(table, [1, 2, 3, None])
    first = at_main(table, cache)
    assert first is not None and getattr(first, "built", False)
    table = append(table, [4, 5])  # another writer's append: read from its file only
    moved = at_main(table, cache)
    assert moved is first and not getattr(moved, "built", True)
    assert moved.contains([pa.array([None, 1, 4, 5, 6])]).tolist() == [
        True,
        True,
        True,
        True,
        False,
    ]
    table.delete(EqualTo("id", 2))  # a delete: the set is built again, without key 2
    table = table.refresh()
    rebuilt = at_main(table, cache)
    assert rebuilt is not None and rebuilt is not first and getattr(rebuilt, "built", False)
    assert rebuilt.contains([pa.array([1, 2, 3, 4])]).tolist() == [True, False, True, True]
    # a snapshot the set's is not an ancestor of (a rollback): built again
    stale = KeySet.build(INT, 12345, [[chunked([99])]])
    keep_key_set(table, ["id"], stale, cache)
    again = at_main(table, cache)
    assert again is not None and again is not stale
    assert again.contains([pa.array([99, 3])]).tolist() == [False, True]


def test_no_set_for_a_table_over_the_budget_or_of_float_keys(
    catalog: Any, monkeypatch: Any
) -> None:
    table = catalog.create_table("ns.t", SCHEMA, properties={"format-version": "2"})
    table = append(table, list(range(100)))
    monkeypatch.setenv("TABLEFLOW_KEY_INDEX_MAX_BYTES", str(100 * 16 - 1))
    assert at_main(table, IndexCache()) is None
    monkeypatch.setenv("TABLEFLOW_KEY_INDEX_MAX_BYTES", str(100 * 16))
    assert at_main(table, IndexCache()) is not None
    floats = pa.schema([pa.field("x", pa.float64())])
    other = catalog.create_table("ns.f", floats, properties={"format-version": "2"})
    other.append(pa.table([pa.array([1.0])], schema=floats))
    other = other.refresh()
    snapshot = other.current_snapshot().snapshot_id
    assert key_set_at(other, snapshot, ["x"], indexes=IndexCache()) is None


def test_a_table_whose_hashed_keys_collide_gets_no_set(catalog: Any, monkeypatch: Any) -> None:
    schema = pa.schema([pa.field("code", pa.string())])
    table = catalog.create_table("ns.c", schema, properties={"format-version": "2"})
    table.append(pa.table([pa.array(["ab", "cd"])], schema=schema))
    table = table.refresh()
    snapshot = table.current_snapshot().snapshot_id
    assert key_set_at(table, snapshot, ["code"], indexes=IndexCache()) is not None
    monkeypatch.setattr(dedup_index, "HASHER", weak_hash)
    assert key_set_at(table, snapshot, ["code"], indexes=IndexCache()) is None
    assert np.array_equal(weak_hash([pa.array(["ab"])])[1], [2])


def test_a_hashed_key_added_twice_is_a_collision() -> None:
    key_set = KeySet.build(TEXT, 1, [[chunked(["x"], pa.string())]])
    key_set.add([pa.array(["y"])])
    with pytest.raises(KeyCollision, match="in it already"):
        key_set.add([pa.array(["z", "x"])])
    with pytest.raises(KeyCollision, match="repeats"):
        KeySet.build(TEXT, 1, [[chunked(["x"], pa.string())]]).add([pa.array(["q", "q"])])
