"""The driver's rewrite of an upsert table's data files with deletes
(pipeline/apply_deletes.py) and its one `replace` snapshot (engine/rewrite_files.py), on a
pyiceberg SQLite catalog in a temporary directory (real files, no process): batches
merged as the driver does, the rewrite, read back by pyiceberg and DuckDB and compared
with an independent model; the key index remapped, not rebuilt; a commit during the
rewrite makes it give up with nothing lost."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tableflow_core.pipeline.apply_deletes import (
    ApplyDeletesError,
    apply_deletes,
    files_with_deletes,
    rewrite_data_file,
)
from tableflow_core.pipeline.key_index import INDEXES, IndexCache
from tests.unit.test_upsert_rows import TABLE_SCHEMA, Record, Upserts, model


def history(seed: int, n: int, keys: int) -> list[Record]:
    rng = random.Random(seed)
    offsets = [0, 0]
    records: list[Record] = []
    for i in range(n):
        partition = rng.randrange(2)
        value = None if rng.random() < 0.1 else f"v{i}"
        records.append((rng.randrange(keys), partition, offsets[partition], 1_000 + i, value))
        offsets[partition] += 1
    return records


def duckdb_rows(table: Any) -> dict[int, str]:
    """The table read by DuckDB's Iceberg reader (its own position-delete code)."""
    from tableflow_core.readers.duckdb_reader import duckdb_connection

    found = (
        duckdb_connection()
        .execute(f"SELECT id, name FROM iceberg_scan('{table.metadata_location}')")
        .fetchall()
    )
    rows = dict(found)
    assert len(rows) == len(found), "one row per key"
    return rows


def test_deletes_applied_leave_the_rows_in_new_files_without_delete_files(catalog: Any) -> None:
    upserts = Upserts(catalog)
    done, records = upserts.apply_in_batches(history(7, 1_200, 300), (400, 200, 300, 300))
    table = upserts.table()
    before = table.metadata.current_snapshot()
    assert int(before.summary["total-delete-files"]) > 0
    with_deletes = files_with_deletes(table, before.snapshot_id)
    result = apply_deletes(table, indexes=None)
    assert result.snapshot_id is not None and len(result.files) == len(with_deletes) >= 3
    # The small files of one partition are gathered into one new file, each in turn.
    assert len({f.new.file_path for f in result.files if f.new is not None}) == 1
    offsets = sorted(f.offset for f in result.files if f.new is not None)
    assert offsets[0] == 0 and len(set(offsets)) == len(offsets)
    table = upserts.table()
    after = table.metadata.current_snapshot()
    summary = after.summary
    assert summary.operation.value == "replace" and after.parent_snapshot_id == before.snapshot_id
    assert summary["total-delete-files"] == "0" and summary["total-position-deletes"] == "0"
    assert int(summary["removed-position-delete-files"]) == result.delete_files
    assert int(summary["total-records"]) == len(model(done))
    assert after.sequence_number == before.sequence_number + 1
    for task in table.scan().plan_files():  # no delete file left, the new files' sequence
        assert not task.delete_files
    new_paths = {f.new.file_path for f in result.files if f.new is not None}
    entries = {e.data_file.file_path: e for e in _live_entries(table)}
    assert all(entries[p].sequence_number == after.sequence_number for p in new_paths)
    assert upserts.rows() == model(done)
    assert duckdb_rows(table) == model(done)
    # The new file keeps the old one's columns, field ids and order columns.
    new = pq.ParquetFile(next(iter(new_paths)).removeprefix("file://"))
    assert new.schema_arrow.names == TABLE_SCHEMA.names
    assert [f.metadata[b"PARQUET:field_id"] for f in new.schema_arrow] == [
        b"1",
        b"2",
        b"3",
        b"4",
        b"5",
    ]
    # Batches go on from the rewritten table (and a second rewrite of it).
    batch, records = records[:300], records[300:]
    upserts.apply(batch)
    done += batch
    apply_deletes(upserts.table(), indexes=None)
    assert upserts.rows() == model(done) == duckdb_rows(upserts.table())


def _live_entries(table: Any) -> list[Any]:
    snapshot = table.metadata.current_snapshot()
    return [
        entry
        for manifest in snapshot.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
    ]


def test_the_warm_key_index_is_remapped_onto_the_new_files(catalog: Any) -> None:
    INDEXES.clear()
    upserts = Upserts(catalog)
    # 900 in three batches (two files with deletes, gathered into one), then 300
    done, records = upserts.apply_in_batches(history(11, 1_200, 200), (300, 300, 300))
    result = apply_deletes(upserts.table())
    assert result.index_remapped and len(result.files) >= 2
    assert len({f.new.file_path for f in result.files if f.new is not None}) == 1
    # The next batch finds the index at the replace snapshot: looked up, not built.
    batch = records[:300]
    delta = upserts.apply(batch)
    done += batch
    assert "index_build" not in delta.timings and "index_lookup" in delta.timings
    assert upserts.rows() == model(done) == duckdb_rows(upserts.table())
    INDEXES.clear()


def test_a_commit_during_the_rewrite_makes_it_give_up_with_nothing_lost(catalog: Any) -> None:
    upserts = Upserts(catalog)
    done, records = upserts.apply_in_batches(history(5, 600, 100), (300, 200))
    table = upserts.table()
    last = records[:100]

    def concurrent_batch() -> None:  # deletes rows of files the rewrite is replacing
        upserts.apply(last)

    data_dir = Path(table.location().removeprefix("file://")) / "data"
    files_before = set(data_dir.iterdir())
    with pytest.raises(ApplyDeletesError, match="changed during the rewrite"):
        apply_deletes(table, indexes=IndexCache(), before_commit=concurrent_batch)
    done += last
    assert upserts.rows() == model(done) == duckdb_rows(upserts.table())
    assert upserts.table().metadata.current_snapshot().summary.operation.value != "replace"
    # The rewrite's new files were deleted; only the concurrent batch's files are new.
    added = set(data_dir.iterdir()) - files_before
    live = {
        Path(e.data_file.file_path.removeprefix("file://")) for e in _live_entries(upserts.table())
    }
    assert added <= live


def test_a_file_rewritten_streams_row_groups_and_drops_exact_positions(catalog: Any) -> None:
    catalog.create_table(
        "ns.wide", pa.schema([("id", pa.int64()), ("s", pa.string())]),
        properties={"write.parquet.row-group-limit": "1000"},
    )  # fmt: skip
    table = catalog.load_table("ns.wide")
    n = 5_000
    table.append(pa.table({"id": pa.array(range(n), pa.int64()), "s": [f"s{i}" for i in range(n)]}))
    (task,) = table.scan().plan_files()
    deleted = np.array([0, 1, 999, 1000, 2500, 4999], dtype=np.int64)
    new = rewrite_data_file(table, task.file, deleted, batch_rows=333)
    assert new is not None and new.record_count == n - len(deleted)
    read = pq.ParquetFile(new.file_path.removeprefix("file://"))
    assert read.metadata.num_row_groups == 5 and read.metadata.row_group(0).num_rows == 1000
    ids = read.read().column("id").to_pylist()
    assert ids == [i for i in range(n) if i not in set(deleted.tolist())]
    assert new.lower_bounds and new.upper_bounds and new.value_counts  # column metrics
    assert rewrite_data_file(table, task.file, np.arange(n, dtype=np.int64)) is None


def test_a_partitioned_table_keeps_each_files_partition(catalog: Any) -> None:
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    from tableflow_core.engine.row_delta import RowDelta
    from tableflow_core.pipeline.upsert_rows import write_position_deletes

    schema = pa.schema([("id", pa.int64()), ("region", pa.string())])
    table = catalog.create_table(("ns", "parts"), schema, properties={"format-version": "2"})
    field_id = table.schema().find_field("region").field_id
    spec = PartitionSpec(PartitionField(field_id, 1000, IdentityTransform(), "region"))
    with table.update_spec() as update:
        update.add_identity("region")
    table = catalog.load_table(("ns", "parts"))
    assert table.spec().fields[0].name == spec.fields[0].name
    rows = pa.table({"id": pa.array(range(40), pa.int64()), "region": ["eu", "us"] * 20})
    table.append(rows)
    table = catalog.load_table(("ns", "parts"))
    deletes = []
    for task in table.scan().plan_files():  # a delete file in its data file's partition
        written = write_position_deletes(
            table.io, table.location(), task.file.file_path, np.array([0, 3])
        )
        deletes.append(
            DataFile.from_args(
                content=written.content, file_path=written.file_path,
                file_format=written.file_format, partition=task.file.partition,
                record_count=written.record_count,
                file_size_in_bytes=written.file_size_in_bytes,
                lower_bounds=written.lower_bounds, upper_bounds=written.upper_bounds,
            )
        )  # fmt: skip
        deletes[-1].spec_id = task.file.spec_id
    with table.transaction() as tx, RowDelta(tx, table.io, deletes, {}, "main"):
        pass
    table = catalog.load_table(("ns", "parts"))
    expected = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert len(expected) == 36
    result = apply_deletes(table, indexes=None)
    table = catalog.load_table(("ns", "parts"))
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
    partitions = {f.new.partition[0] for f in result.files if f.new is not None}
    assert partitions == {"eu", "us"}  # one new file per partition, never mixed
    assert len({f.new.file_path for f in result.files if f.new is not None}) == 2
    eu = table.scan(row_filter="region = 'eu'").plan_files()  # pruned by partition
    assert {t.file.partition[0] for t in eu} == {"eu"}


def test_a_table_the_driver_does_not_rewrite_goes_to_spark_s_rewrite(
    catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A format version 1 table (no position deletes of the driver's kind; v3's deletion
    vectors likewise): `maintain`'s operation hands it to the registry's Spark function."""
    from tableflow_core.maintenance import operations
    from tableflow_core.pipeline.apply_deletes import ApplyDeletesUnsupported, driver_operation

    catalog.create_table("ns.v1", TABLE_SCHEMA, properties={"format-version": "1"})
    with pytest.raises(ApplyDeletesUnsupported, match="format version 1"):
        apply_deletes(catalog.load_table("ns.v1"))
    called: list[Any] = []
    monkeypatch.setitem(
        operations.OPERATIONS, "apply_deletes", lambda *args: called.append(args) or {"n": 1}
    )
    metrics = driver_operation(catalog, ("ns", "v1"))("spark", "target", "settings", None)
    assert called == [("spark", "target", "settings", None)]
    assert metrics["by"] == "spark" and "format version 1" in metrics["why"]


def test_a_commit_of_unknown_outcome_keeps_the_new_files(
    catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog took the commit but the answer was lost (an error that is not a
    refusal): the new files may be the table's now, so they are not deleted."""
    from pyiceberg.table import Transaction

    upserts = Upserts(catalog)
    done, _ = upserts.apply_in_batches(history(13, 600, 100), (300, 300))
    committed = Transaction.commit_transaction

    def lost_answer(self: Any) -> Any:
        committed(self)
        raise ConnectionError("the catalog's answer was lost")

    monkeypatch.setattr(Transaction, "commit_transaction", lost_answer)
    with pytest.raises(ConnectionError):
        apply_deletes(upserts.table(), indexes=None)
    monkeypatch.undo()
    table = upserts.table()
    assert table.metadata.current_snapshot().summary.operation.value == "replace"
    assert upserts.rows() == model(done) == duckdb_rows(table)
