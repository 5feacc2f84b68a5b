"""The driver's upsert merge (pipeline/upsert_rows.py) and its one-snapshot publish
(engine/row_delta.py), against an independent model, on a pyiceberg SQLite catalog in a
temporary directory (no process): batches with repeated keys, tombstones, records older
than the rows they meet, keys that were deleted before, a replay, several data files."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tableflow_core.engine.run_branch import publish_run
from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.ingest.columns import SOURCE_TIMESTAMP_COLUMN, TOMBSTONE_COLUMN
from tableflow_core.ingest.upsert_order import OFFSET_COLUMN, PARTITION_COLUMN, TIMESTAMP_COLUMN
from tableflow_core.pipeline.data_files import file_io_properties, write_data_files
from tableflow_core.pipeline.upsert_rows import (
    DeletesTable,
    after_remembered,
    later,
    latest_per_key,
    merge_batch,
)

# A record: (key, partition, offset, timestamp ms or None, value or None for a tombstone)
Record = tuple[int, int, int, int | None, str | None]
TABLE_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
        pa.field(TIMESTAMP_COLUMN, pa.timestamp("us", tz="UTC")),
        pa.field(PARTITION_COLUMN, pa.int32()),
        pa.field(OFFSET_COLUMN, pa.int64()),
    ]
)


def decoded(records: list[Record]) -> pa.Table:
    """Records as the read tasks send them: the table's columns (the key filled on a
    tombstone), the source position and the tombstone flag."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in records], pa.int64()),
            "name": pa.array([r[4] for r in records], pa.string()),
            SOURCE_PARTITION_COLUMN: pa.array([r[1] for r in records], pa.int32()),
            SOURCE_OFFSET_COLUMN: pa.array([r[2] for r in records], pa.int64()),
            SOURCE_TIMESTAMP_COLUMN: pa.array([r[3] for r in records], pa.int64()),
            TOMBSTONE_COLUMN: pa.array([r[4] is None for r in records], pa.bool_()),
        }
    )


def model(records: list[Record]) -> dict[int, str]:
    """Per key, its latest record by (timestamp, partition, offset), no timestamp first."""
    latest: dict[int, tuple[tuple[int, int, int], str | None]] = {}
    for key, partition, offset, ts, value in records:
        position = (ts if ts is not None else -(2**62), partition, offset)
        if key not in latest or position > latest[key][0]:
            latest[key] = (position, value)
    return {k: v for k, (_, v) in latest.items() if v is not None}


class Upserts:
    """An upsert table and its deletes table, batches merged and published as apply's
    shared path does."""

    def __init__(self, catalog: Any, namespace: str = "ns") -> None:
        self.catalog = catalog
        self.name = f"{namespace}.t"
        catalog.create_table(self.name, TABLE_SCHEMA, properties={"format-version": "2"})
        self.deletes = DeletesTable(catalog, (namespace, "t__tableflow_deletes"), ("id",))

    def table(self) -> Any:
        return self.catalog.load_table(self.name)

    def apply(self, records: list[Record]) -> Any:
        table = self.table()
        base = table.metadata.current_snapshot_id
        io = file_io_properties(table.io.properties)  # an object store needs its endpoint
        delta = merge_batch(
            table, base, decoded(records), ("id",), self.deletes.read, io,
            remember=self.deletes.remember,
        )  # fmt: skip
        if base is None:  # a new table's first snapshot, as begin_run gives it
            with table.transaction() as tx, tx.update_snapshot().fast_append():
                pass
            table = self.table()
            base = table.metadata.current_snapshot_id
        snapshot = publish_run(
            table, base, "tableflow_run_test", {"tableflow.test": "1"},
            data_files=delta.data_files, delete_files=delta.delete_files, new_branch=True,
        )  # fmt: skip
        if delta.advance_index is not None:  # the key index kept warm, as run's batches do
            delta.advance_index(snapshot)
        return delta

    def apply_in_batches(
        self, records: list[Record], sizes: tuple[int, ...]
    ) -> tuple[list[Record], list[Record]]:
        """`records` applied in batches of `sizes`: (the records applied, the rest)."""
        done: list[Record] = []
        for size in sizes:
            batch, records = records[:size], records[size:]
            self.apply(batch)
            done += batch
        return done, records

    def rows(self) -> dict[int, str]:
        read = self.table().scan().to_arrow()
        rows = {r["id"]: r["name"] for r in read.to_pylist()}
        assert len(rows) == read.num_rows, "one row per key"
        return rows


def test_latest_record_per_key_by_timestamp_partition_offset() -> None:
    records: list[Record] = [
        (1, 0, 0, 100, "a"),
        (1, 1, 0, 100, "b"),  # same timestamp, later partition: wins
        (2, 0, 1, None, "c"),  # no timestamp: earlier than any
        (2, 0, 2, 5, None),  # a tombstone wins over it
        (3, 2, 7, 50, "d"),
        (3, 0, 9, 40, "e"),  # later offset, earlier timestamp: loses
    ]
    latest = latest_per_key(decoded(records), ("id",))
    got = {r["id"]: (r["name"], r[TOMBSTONE_COLUMN]) for r in latest.to_pylist()}
    assert got == {1: ("b", False), 2: (None, True), 3: ("d", False)}
    assert latest.column(TIMESTAMP_COLUMN).type == pa.timestamp("us", tz="UTC")
    assert latest.column(TIMESTAMP_COLUMN).to_pylist()[2].timestamp() == 0.05


def test_later_treats_a_row_without_position_as_the_earliest() -> None:
    def positions(rows: list[tuple[int | None, int | None, int | None]]) -> pa.Table:
        return pa.table(
            {
                TIMESTAMP_COLUMN: pa.array([r[0] for r in rows], pa.int64()).cast(
                    pa.timestamp("us", tz="UTC")
                ),
                PARTITION_COLUMN: pa.array([r[1] for r in rows], pa.int32()),
                OFFSET_COLUMN: pa.array([r[2] for r in rows], pa.int64()),
            }
        )

    new = positions([(10, 0, 5), (10, 0, 5), (10, 1, 0), (None, 0, 9), (10, 0, 1)])
    old = positions([(9, 3, 9), (10, 0, 5), (10, 0, 9), (1, 0, 0), (None, None, None)])
    assert later(new, old).tolist() == [True, False, True, False, True]


def test_a_candidate_at_its_remembered_delete_is_kept_an_older_one_dropped() -> None:
    candidates = latest_per_key(decoded([(1, 0, 5, 10, "a"), (2, 0, 6, 10, "b")]), ("id",))
    remembered = latest_per_key(decoded([(1, 0, 5, 10, None), (2, 0, 7, 10, None)]), ("id",))
    remembered = remembered.select(["id", TIMESTAMP_COLUMN, PARTITION_COLUMN, OFFSET_COLUMN])
    keep = after_remembered(candidates, remembered, ("id",))
    assert dict(zip(candidates.column("id").to_pylist(), keep.tolist(), strict=True)) == {
        1: True,
        2: False,
    }


def test_batches_merged_on_the_driver_equal_the_model_in_any_split(catalog: Any) -> None:
    rng = random.Random(31)
    offsets = [0, 0, 0]
    history: list[Record] = []
    for i in range(900):
        partition = rng.randrange(3)
        roll = rng.random()
        ts = None if roll < 0.03 else 1_000 + rng.randrange(300)  # ties, out of order
        value = None if roll < 0.2 else f"n{i}"
        history.append((rng.randrange(120), partition, offsets[partition], ts, value))
        offsets[partition] += 1
    upserts = Upserts(catalog)
    done: list[Record] = []
    for size in (200, 1, 37, 150, 12, 250, 250):
        batch, history = history[:size], history[size:]
        upserts.apply(batch)
        done += batch
        assert upserts.rows() == model(done)
    # a replay of the last batch (a re-run after a crash before the publish) changes nothing
    replay = upserts.apply(done[-250:])
    assert (replay.rows_inserted, replay.rows_deleted) == (0, 0)
    assert upserts.rows() == model(done)
    table = upserts.table()
    summary = table.metadata.snapshot_by_id(table.metadata.current_snapshot_id).summary
    assert summary.operation.value == "append"  # the replay: no data or delete file
    history_ops = {s.summary.operation.value for s in table.metadata.snapshots}
    assert "overwrite" in history_ops  # the row deltas
    assert int(summary["total-position-deletes"]) > 0


def test_the_merge_remembers_tombstones_after_reading_the_deletes_table(catalog: Any) -> None:
    upserts = Upserts(catalog)
    upserts.apply([(k, 0, k, 1_000, f"v{k}") for k in range(10)])
    calls: list[tuple[str, list[int]]] = []

    def read(candidates: pa.Table) -> pa.Table | None:
        calls.append(("read", sorted(candidates.column("id").to_pylist())))
        return upserts.deletes.read(candidates)

    def remember(rows: pa.Table) -> None:
        calls.append(("remember", sorted(rows.column("id").to_pylist())))
        upserts.deletes.remember(rows)

    table = upserts.table()
    batch = decoded([(3, 0, 10, 2_000, None), (11, 0, 11, 2_000, "new"), (12, 0, 12, 2_000, None)])
    delta = merge_batch(table, table.metadata.current_snapshot_id, batch, ("id",), read, {},
                        remember=remember)  # fmt: skip
    # The batch's own tombstones are not among what it reads: remembered after the read.
    assert calls == [("read", [11]), ("remember", [3, 12])]
    assert delta.remembered is None and "merge_remember_deletes" in delta.timings
    remembered = catalog.load_table("ns.t__tableflow_deletes").scan().to_arrow()
    assert sorted(remembered.column("id").to_pylist()) == [3, 12]


def test_a_file_older_than_the_batch_has_only_its_keys_read(catalog: Any) -> None:
    upserts = Upserts(catalog)
    upserts.apply([(k, 0, k, 1_000, f"v{k}") for k in range(50)])
    delta = upserts.apply([(k, 0, 50 + k, 2_000, None if k % 2 else "w") for k in range(0, 50, 5)])
    assert (delta.files_scanned, delta.files_key_only) == (1, 1)
    expected = {k: f"v{k}" for k in range(50) if k % 5}
    expected.update({k: "w" for k in range(0, 50, 10)})
    assert upserts.rows() == expected
    # an older record than the row: the file's positions are read, the row stays
    stale = upserts.apply([(1, 0, 0, 500, "old")])
    assert (stale.files_key_only, stale.rows_inserted, stale.rows_deleted) == (0, 0, 0)
    assert upserts.rows() == expected


def test_rows_written_before_the_table_kept_positions_are_superseded(catalog: Any) -> None:
    upserts = Upserts(catalog)
    table = upserts.table()
    old = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "name": ["a", "b"],
            TIMESTAMP_COLUMN: pa.nulls(2, pa.timestamp("us", tz="UTC")),
            PARTITION_COLUMN: pa.nulls(2, pa.int32()),
            OFFSET_COLUMN: pa.nulls(2, pa.int64()),
        }
    )
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for data_file in write_data_files(table.metadata, {}, old):
            append.append_data_file(data_file)
    upserts.apply([(1, 0, 0, None, "a2"), (2, 0, 1, None, None)])
    assert upserts.rows() == {1: "a2"}
    positions = upserts.table().scan().to_arrow().column(OFFSET_COLUMN).to_pylist()
    assert positions == [0] and np.all(np.array(positions) >= 0)


def test_a_key_of_two_columns_matches_on_both(catalog: Any) -> None:
    schema = pa.schema([pa.field("region", pa.string()), *TABLE_SCHEMA])
    table = catalog.create_table("ns.two", schema, properties={"format-version": "2"})

    def batch(records: list[tuple[str, int, int, str | None]]) -> pa.Table:
        rows = decoded([(k, 0, offset, 1_000 + offset, v) for _, k, offset, v in records])
        return rows.add_column(0, "region", pa.array([r[0] for r in records]))

    def publish(records: list[tuple[str, int, int, str | None]]) -> None:
        current = catalog.load_table("ns.two")
        base = current.metadata.current_snapshot_id
        delta = merge_batch(current, base, batch(records), ("region", "id"), lambda _k: None, {})
        if base is None:
            with current.transaction() as tx, tx.update_snapshot().fast_append():
                pass
            current = catalog.load_table("ns.two")
            base = current.metadata.current_snapshot_id
        publish_run(
            current, base, "tableflow_run_two", {}, data_files=delta.data_files,
            delete_files=delta.delete_files, new_branch=True,
        )  # fmt: skip

    publish([("eu", 1, 0, "a"), ("us", 1, 1, "b"), ("eu", 2, 2, "c")])
    publish([("us", 1, 3, "b2"), ("eu", 2, 4, None), ("us", 2, 5, "d")])
    rows = catalog.load_table("ns.two").scan().to_arrow().to_pylist()
    assert sorted((r["region"], r["id"], r["name"]) for r in rows) == [
        ("eu", 1, "a"),
        ("us", 1, "b2"),
        ("us", 2, "d"),
    ]
    assert table.metadata.format_version == 2


def test_a_table_of_another_format_version_is_left_to_spark(catalog: Any) -> None:
    from tableflow_core.pipeline.upsert_rows import DriverMergeUnsupported

    table = catalog.create_table("ns.v1", TABLE_SCHEMA, properties={"format-version": "1"})
    with pytest.raises(DriverMergeUnsupported, match="format version 1"):
        merge_batch(table, None, decoded([(1, 0, 0, 1, "a")]), ("id",), lambda _k: None, {})


def test_the_deletes_table_is_read_from_the_earliest_candidate_on(catalog: Any) -> None:
    deletes = DeletesTable(catalog, ("ns", "d__tableflow_deletes"), ("id",))
    for ts in (100, 200, 300):  # a file per run that deleted, as the runs append them
        remembered = latest_per_key(decoded([(ts, 0, ts, ts, None)]), ("id",))
        deletes.remember(
            remembered.select(["id", TIMESTAMP_COLUMN, PARTITION_COLUMN, OFFSET_COLUMN])
        )

    def read(records: list[Record]) -> set[int]:
        found = deletes.read(latest_per_key(decoded(records), ("id",)))
        assert found is not None
        return set(found.column("id").to_pylist())

    assert read([(1, 0, 900, 250, "a"), (2, 0, 901, 260, "b")]) == {300}
    assert read([(1, 0, 900, 200, "a")]) == {200, 300}  # a tie may still come after it
    assert read([(1, 0, 900, None, "a"), (2, 0, 901, 260, "b")]) == {100, 200, 300}
    # a candidate older than its key's remembered delete is dropped, a later one kept
    upserts = Upserts(catalog)
    upserts.apply([(7, 0, 0, 1_000, "x")])
    upserts.apply([(7, 0, 1, 2_000, None)])
    upserts.apply([(7, 1, 0, 1_500, "older"), (8, 1, 1, 1_500, "y")])
    assert upserts.rows() == {8: "y"}
    upserts.apply([(7, 1, 2, 2_500, "later")])
    assert upserts.rows() == {7: "later", 8: "y"}
