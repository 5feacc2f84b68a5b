"""An upsert table's first load written by its read tasks (pipeline/first_load.py): each
task reduces and writes its rows, the driver reduces the places over the tasks and deletes
the superseded rows in the publish. Against an independent model, on a pyiceberg SQLite
catalog (no process): keys whose records sit in several tasks, tombstones, remembered
deletes later than a loaded record, then batches merged on the warm key index."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tableflow_core.engine.run_branch import publish_run
from tableflow_core.ingest.upsert_order import CDC_LAST_COMMIT_COLUMN, CDC_LSN_COLUMN, OFFSET_COLUMN
from tableflow_core.pipeline.data_files import file_io_properties
from tableflow_core.pipeline.first_load import PLACE_FILE, merge_first_load, write_latest
from tableflow_core.pipeline.key_index import IndexCache
from tableflow_core.pipeline.shared_tasks import TableReport, _ipc, read_placed
from tableflow_core.pipeline.upsert_rows import (
    DeletesTable,
    latest_order,
    latest_per_key,
    merge_batch,
    positioned,
    rows_by_key,
)

from .test_upsert_rows import TABLE_SCHEMA, Record, decoded, model


def _history(seed: int, count: int, keys: int) -> list[Record]:
    rng = random.Random(seed)
    offsets = [0, 0, 0]
    history: list[Record] = []
    for i in range(count):
        partition = rng.randrange(3)
        roll = rng.random()
        ts = None if roll < 0.03 else 1_000 + rng.randrange(300)  # ties, out of order
        value = None if roll < 0.2 else f"n{i}"
        history.append((rng.randrange(keys), partition, offsets[partition], ts, value))
        offsets[partition] += 1
    return history


class FirstLoad:
    """A new upsert table loaded as a shared job's tasks and driver do."""

    def __init__(self, catalog: Any, properties: dict[str, str] | None = None) -> None:
        self.catalog = catalog
        catalog.create_table(
            "ns.t", TABLE_SCHEMA, properties={"format-version": "2", **(properties or {})}
        )
        self.deletes = DeletesTable(catalog, ("ns", "t__tableflow_deletes"), ("id",))
        self.indexes = IndexCache()

    def table(self) -> Any:
        return self.catalog.load_table("ns.t")

    def publish(self, table: Any, data_files: Any, delete_files: Any) -> int:
        if table.metadata.current_snapshot_id is None:  # begin_run's first snapshot
            with table.transaction() as tx, tx.update_snapshot().fast_append():
                pass
            table = self.table()
        return publish_run(
            table, table.metadata.current_snapshot_id, "tableflow_run_test", {},
            data_files=data_files, delete_files=delete_files, new_branch=True,
        )  # fmt: skip

    def load(self, tasks: list[list[list[Record]]]) -> Any:
        """`tasks`: each task's flushes, each a list of records it wrote at once."""
        table = self.table()
        io = file_io_properties(table.io.properties)
        reports = []
        for flushes in tasks:
            report = TableReport(0)
            placed = []
            for records in flushes:
                written = write_latest(
                    table.metadata, io, decoded(records), ("id",), False, len(report.data_files)
                )
                report.data_files.extend(written.data_files)
                placed.append(written.placed)
            joined = pa.concat_tables(placed)
            report.placed = _ipc(joined.to_batches(), joined.schema)
            reports.append(report)
        placed_rows, data_files = read_placed(reports)
        assert placed_rows is not None
        delta = merge_first_load(
            table, placed_rows, data_files, ("id",), self.deletes.read, indexes=self.indexes
        )
        if delta.remembered is not None:
            self.deletes.remember(delta.remembered)
        snapshot = self.publish(table, delta.data_files, delta.delete_files)
        assert delta.advance_index is not None
        delta.advance_index(snapshot)
        return delta

    def merge(self, records: list[Record]) -> Any:
        table = self.table()
        base = table.metadata.current_snapshot_id
        io = file_io_properties(table.io.properties)
        delta = merge_batch(
            table, base, decoded(records), ("id",), self.deletes.read, io,
            indexes=self.indexes, remember=self.deletes.remember,
        )  # fmt: skip
        snapshot = self.publish(table, delta.data_files, delta.delete_files)
        if delta.advance_index is not None:
            delta.advance_index(snapshot)
        return delta

    def rows(self) -> dict[int, str]:
        read = self.table().scan().to_arrow()
        rows = {r["id"]: r["name"] for r in read.to_pylist()}
        assert len(rows) == read.num_rows, "one row per key"
        return rows


def _split(records: list[Record], parts: int, rng: random.Random) -> list[list[Record]]:
    cuts = sorted(rng.sample(range(1, len(records)), parts - 1))
    return [records[a:b] for a, b in zip([0, *cuts], [*cuts, len(records)], strict=True)]


@pytest.mark.parametrize(("seed", "target_bytes"), [(1, None), (2, None), (3, 2_000)])
def test_a_load_over_tasks_and_flushes_equals_the_model(
    catalog: Any, seed: int, target_bytes: int | None
) -> None:
    rng = random.Random(seed)
    history = _history(seed, 1_200, 150)
    tasks = [_split(part, rng.randrange(1, 4), rng) for part in _split(history, 3, rng)]
    # a small target file size: a flush's rows in many files, each file's rows in order
    size = {} if target_bytes is None else {"write.target-file-size-bytes": str(target_bytes)}
    load = FirstLoad(catalog, size)
    delta = load.load(tasks)
    if target_bytes is not None:
        assert len(delta.data_files) > 2 * len(tasks)
    assert load.rows() == model(history)
    # superseded rows are deleted in the same snapshot: never visible, but written
    assert delta.rows_inserted == len(model(history))
    assert delta.rows_deleted > 0 and delta.delete_files
    table = load.table()
    assert table.metadata.snapshot_by_id(table.metadata.current_snapshot_id).summary[
        "total-records"
    ] == str(delta.rows_inserted + delta.rows_deleted)
    # the index built from the places serves the next batches as the table's own would
    done = list(history)
    for size in (300, 50, 300):
        batch = _history(seed + 100 + size, size, 200)
        batch = [(k, p, o + 10_000 + len(done), ts, v) for k, p, o, ts, v in batch]
        delta = load.merge(batch)
        assert "index_build" not in delta.timings, "the first load left the index warm"
        done += batch
        assert load.rows() == model(done)


def test_a_load_of_one_task_writes_no_delete_file(catalog: Any) -> None:
    records: list[Record] = [(k % 40, 0, k, 1_000 + k, f"v{k}") for k in range(100)]
    load = FirstLoad(catalog)
    delta = load.load([[records]])
    assert delta.delete_files == [] and delta.rows_deleted == 0
    assert load.rows() == model(records)


def test_a_remembered_delete_later_than_a_loaded_record_deletes_its_row(catalog: Any) -> None:
    load = FirstLoad(catalog)
    remembered = latest_per_key(decoded([(1, 0, 50, 5_000, None), (2, 0, 51, 10, None)]), ("id",))
    load.deletes.remember(remembered.drop_columns(["__tf_tombstone"]))
    delta = load.load(
        [[[(1, 1, 0, 1_000, "older"), (2, 1, 1, 1_000, "later")]], [[(3, 2, 0, None, "x")]]]
    )
    assert load.rows() == {2: "later", 3: "x"}
    assert delta.rows_deleted == 1


def test_places_are_renumbered_into_the_runs_files(catalog: Any) -> None:
    load = FirstLoad(catalog)
    table = load.table()
    io = file_io_properties(table.io.properties)
    reports = []
    for first in (0, 10):
        records: list[Record] = [(first + k, 0, first + k, 1, "v") for k in range(3)]
        written = write_latest(table.metadata, io, decoded(records), ("id",), False, 0)
        reports.append(
            TableReport(
                0,
                data_files=written.data_files,
                placed=_ipc(written.placed.to_batches(), written.placed.schema),
            )
        )
    placed, data_files = read_placed(reports)
    assert placed is not None and len(data_files) == 2
    assert placed.column(PLACE_FILE).to_pylist() == [0, 0, 0, 1, 1, 1]


def test_rows_written_in_order_whatever_their_batches(catalog: Any) -> None:
    """pyiceberg's table writer packs batches into files by size in any order (500, 500,
    200 rows: the first and third share a file); a first load's places need the order."""
    from tableflow_core.pipeline.data_files import write_data_files

    table = catalog.create_table(
        "ns.order", TABLE_SCHEMA,
        properties={"format-version": "2", "write.target-file-size-bytes": "30000"},
    )  # fmt: skip
    records: list[Record] = [(k, 0, k, 1, f"v{k}") for k in range(1_800)]
    rows = latest_per_key(decoded(records), ("id",)).drop_columns(["__tf_tombstone"])
    bounds = [0, 500, 1_000, 1_200, 1_800]
    batches = [
        rows.slice(a, b - a).combine_chunks().to_batches()[0] for a, b in itertools.pairwise(bounds)
    ]
    chunked = pa.Table.from_batches(batches)
    io = file_io_properties(table.io.properties)
    files = write_data_files(table.metadata, io, chunked, in_order=True)
    assert len(files) >= 2
    ids = []
    for data_file in files:
        with table.io.new_input(data_file.file_path).open() as stream:
            ids += pq.read_table(stream, columns=["id"]).column("id").to_pylist()
    assert ids == list(range(1_800))


@pytest.mark.parametrize("key_kind", ["int", "text", "two columns"])
@pytest.mark.parametrize("seed", range(4))
def test_rows_by_key_agree_with_the_full_order(key_kind: str, seed: int) -> None:
    """`rows_by_key` (a sort by key, positions compared only for repeated keys) leaves
    out the rows `latest_order` (one sort by key and position) keeps, in runs sorted by key
    or not."""
    rng = random.Random(seed)
    history = _history(seed, 3_000, rng.choice([50, 2_000, 100_000]))
    if seed % 2:  # runs already in key order, as a first load's tasks send them
        history = sorted(history[:1_500]) + sorted(history[1_500:])
    table = positioned(decoded(history))
    keys: tuple[str, ...] = ("id",)
    if key_kind == "text":
        table = table.set_column(0, "id", pc.cast(table.column("id"), pa.string()))
    elif key_kind == "two columns":
        table = table.append_column("half", pc.divide(table.column("id"), 2))
        keys = ("half", "id")
    order, first = latest_order(table, keys)
    by_key, superseded_at = rows_by_key(table, keys)
    superseded = by_key[superseded_at]
    assert sorted(superseded.tolist()) == sorted(order[~first].tolist())


@pytest.mark.parametrize("key_kind", ["int", "text"])
@pytest.mark.parametrize("seed", range(4))
def test_rows_by_key_of_a_change_stream_agree_with_the_full_order(key_kind: str, seed: int) -> None:
    """With source positions (LSNs, some missing, ties) and rows without a Kafka offset
    (written before the table kept positions), `rows_by_key` keeps what `latest_order`
    keeps: numpy's sort of an integer key and Arrow's of any other compare alike."""
    rng = random.Random(seed)
    history = _history(seed, 3_000, rng.choice([50, 2_000]))
    table = positioned(decoded(history))
    n = table.num_rows
    offsets = [None if rng.random() < 0.05 else o for o in table.column(OFFSET_COLUMN).to_pylist()]
    table = table.set_column(
        table.schema.get_field_index(OFFSET_COLUMN), OFFSET_COLUMN, pa.array(offsets, pa.int64())
    )
    commits = [None if rng.random() < 0.1 else rng.randrange(20) for _ in range(n)]
    lsns = [None if c is None else c * 100 + rng.randrange(5) for c in commits]
    table = table.append_column(CDC_LAST_COMMIT_COLUMN, pa.array(commits, pa.int64()))
    table = table.append_column(CDC_LSN_COLUMN, pa.array(lsns, pa.int64()))
    if key_kind == "text":
        table = table.set_column(0, "id", pc.cast(table.column("id"), pa.string()))
    order, first = latest_order(table, ("id",), cdc=True)
    by_key, superseded_at = rows_by_key(table, ("id",), cdc=True)
    assert sorted(by_key[superseded_at].tolist()) == sorted(order[~first].tolist())
    assert len(superseded_at) > 0


def test_rows_by_key_keeps_the_first_of_rows_equal_in_key_and_position() -> None:
    """Rows without a position (NULL timestamp and offset) tie: the first of them is kept,
    by the integer key's numpy path as by Arrow's sort."""
    table = positioned(decoded([(7, 0, 0, None, "a"), (7, 0, 0, None, "b"), (8, 1, 0, 5, "c")]))
    table = table.set_column(
        table.schema.get_field_index(OFFSET_COLUMN), OFFSET_COLUMN, pa.array([None] * 3, pa.int64())
    )
    for key_type in (pa.int64(), pa.string()):
        keyed = table.set_column(0, "id", pc.cast(table.column("id"), key_type))
        order, superseded_at = rows_by_key(keyed, ("id",))
        assert order[superseded_at].tolist() == [1], key_type
