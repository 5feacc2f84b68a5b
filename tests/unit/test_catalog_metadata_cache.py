"""The catalog's metadata cache: never stale across catalog instances, never a lost update.

Two `CatalogService`s on one SQLite file stand for two server processes on one
database (`tableflow catalog serve` plus the one `apply` embeds), which the docs allow.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pyiceberg.exceptions import CommitFailedException, NamespaceAlreadyExistsError
from pyiceberg.io import load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
)
from pyiceberg.types import LongType, NestedField

from tableflow_core.catalog.metadata_cache import MetadataCache
from tableflow_core.catalog.service import CatalogService, TableChange

IDENT = ("n", "t")
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def _services(tmp_path: Path) -> tuple[CatalogService, CatalogService]:
    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    first = CatalogService.open(url, warehouse.as_uri())
    second = CatalogService.open(url, warehouse.as_uri())
    first.catalog.create_namespace("n")
    first.catalog.create_table(IDENT, SCHEMA)
    return first, second


def _read_file(location: str) -> TableMetadata:
    return FromInputFile.table_metadata(load_file_io(location=location).new_input(location))


def _set_property(value: str) -> TableChange:
    return TableChange(IDENT, (), (SetPropertiesUpdate(updates={"k": value}),))


def _first_snapshot(service: CatalogService, snapshot_id: int) -> TableChange:
    """Add a snapshot and point main at it, if main has no snapshot yet."""
    location = service.load_table(IDENT).metadata.location
    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=None,
        sequence_number=1,
        timestamp_ms=int(time.time() * 1000),
        manifest_list=f"{location}/metadata/snap-{snapshot_id}.avro",
        summary=Summary(Operation.APPEND),
        schema_id=0,
    )
    return TableChange(
        IDENT,
        (AssertRefSnapshotId(ref="main", snapshot_id=None),),
        (
            AddSnapshotUpdate(snapshot=snapshot),
            SetSnapshotRefUpdate(ref_name="main", type="branch", snapshot_id=snapshot_id),
        ),
    )


def test_a_commit_through_one_instance_is_seen_by_the_other(tmp_path: Path) -> None:
    first, second = _services(tmp_path)
    before = second.load_table(IDENT)  # now in the second instance's cache
    first.commit_table(_set_property("1"))
    after = second.load_table(IDENT)
    assert after.metadata_location != before.metadata_location
    assert after.metadata.properties["k"] == "1"
    second.commit_table(_set_property("2"))
    seen = first.load_table(IDENT)
    assert seen.metadata.properties["k"] == "2"
    assert seen.metadata == _read_file(seen.metadata_location or "")


def test_stale_requirement_fails_after_a_commit_elsewhere(tmp_path: Path) -> None:
    first, second = _services(tmp_path)
    assert second.load_table(IDENT).metadata.current_snapshot_id is None  # cached: no snapshot
    first.commit_table(_first_snapshot(first, 1))
    with pytest.raises(CommitFailedException):
        second.commit_table(_first_snapshot(second, 2))
    assert second.load_table(IDENT).metadata.current_snapshot_id == 1


def test_concurrent_conflicting_commits_exactly_one_wins(tmp_path: Path) -> None:
    first, second = _services(tmp_path)
    for service in (first, second):
        service.load_table(IDENT)  # warm both caches with the same, soon stale, metadata
    writers = 8
    barrier = threading.Barrier(writers)
    outcomes: list[str] = []

    def commit(writer: int) -> None:
        service = (first, second)[writer % 2]
        change = _first_snapshot(service, 100 + writer)
        barrier.wait()
        try:
            service.commit_table(change)
            outcomes.append(f"won {100 + writer}")
        except CommitFailedException:
            outcomes.append("conflict")

    threads = [threading.Thread(target=commit, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if o.startswith("won")]
    assert len(winners) == 1 and outcomes.count("conflict") == writers - 1
    for service in (first, second):
        loaded = service.load_table(IDENT)
        assert f"won {loaded.metadata.current_snapshot_id}" == winners[0]
        assert len(loaded.metadata.snapshots) == 1


def test_cache_is_bounded_and_least_recently_used_goes_first() -> None:
    cache = MetadataCache(max_entries=2)
    reads: list[str] = []

    def read(location: str) -> TableMetadata:
        reads.append(location)
        return _any_metadata()

    cache.get("a", read)
    cache.get("b", read)
    cache.get("a", read)  # hit; b is now the least recently used
    cache.get("c", read)
    cache.get("a", read)
    cache.get("b", read)  # evicted above: read again
    assert reads == ["a", "b", "c", "b"] and len(cache) == 2


def _any_metadata() -> TableMetadata:
    return new_table_metadata(
        location="file:///x",
        schema=SCHEMA,
        partition_spec=UNPARTITIONED_PARTITION_SPEC,
        sort_order=UNSORTED_SORT_ORDER,
        properties={},
    )


def test_load_tables_reads_many_tables_at_once_and_never_stale(tmp_path: Path) -> None:
    """The bulk read `plan` uses on an in-process catalog: the same metadata as one
    `load_table` per table, missing tables left out, a commit made through another
    instance (another server process on the database) seen at once."""
    first, second = _services(tmp_path)
    first.catalog.create_table(("n", "u"), SCHEMA)
    first.catalog.create_namespace("m")
    first.catalog.create_table(("m", "t"), SCHEMA)
    wanted = [IDENT, ("n", "u"), ("m", "t"), ("n", "absent"), ("nowhere", "t")]

    loaded = second.load_tables(wanted)

    assert sorted(loaded) == sorted([IDENT, ("n", "u"), ("m", "t")])
    for identifier, table in loaded.items():
        single = second.load_table(identifier)
        assert table.metadata_location == single.metadata_location
        assert table.metadata == single.metadata
    first.commit_table(_set_property("v1"))
    assert second.load_tables([IDENT])[IDENT].metadata.properties["k"] == "v1"


def test_a_commit_replaces_the_table_entry_it_supersedes(tmp_path: Path) -> None:
    """A run commits 2-3 times per table: the superseded entries must not push other
    tables' current metadata out of the cache."""
    first, _ = _services(tmp_path)
    before = first.load_table(IDENT).metadata_location
    cache = first._metadata
    assert len(cache) == 1
    for value in ("1", "2", "3"):
        first.commit_table(_set_property(value))
    assert len(cache) == 1  # only the current file's entry
    misses = cache.misses
    current = first.load_table(IDENT)
    assert cache.misses == misses  # served from the cache
    assert current.metadata_location != before
    assert current.metadata == _read_file(current.metadata_location or "")


def test_cache_size_is_configurable(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    service = CatalogService.open(
        f"sqlite:///{tmp_path / 'c.db'}", warehouse.as_uri(), metadata_cache_entries=3
    )
    service.catalog.create_namespace("n")
    for i in range(5):
        service.catalog.create_table(("n", f"t{i}"), SCHEMA)
    service.load_tables([("n", f"t{i}") for i in range(5)])
    assert len(service._metadata) == 3


def test_a_namespace_two_servers_create_at_once_exists_for_the_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes creating the same namespace at once (two `tableflow run`s starting
    on one embedded catalog): the second's insert loses to the first's after its
    existence check passed. It gets AlreadyExists (409, which `apply` accepts), not the
    database's IntegrityError (500)."""
    first, second = _services(tmp_path)
    first.create_namespace(("raced",), {})
    # The second's check ran before the first's insert committed.
    monkeypatch.setattr(second.catalog, "namespace_exists", lambda _namespace: False)
    with pytest.raises(NamespaceAlreadyExistsError, match="raced"):
        second.create_namespace(("raced",), {})
    monkeypatch.undo()
    assert second.namespace_exists(("raced",))
