"""Catalog operations over pyiceberg's SqlCatalog, with no HTTP in sight.

pyiceberg does the table-spec work (requirement validation, `update_table_metadata`,
metadata files); this module adds what a shared server needs on top: per-table
locks, atomic multi-table commits, hiding SqlCatalog's namespace marker, and
SQLite settings that hold up under concurrent requests.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergNamespaceProperties, IcebergTables, SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.io import load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import StagedTable, Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import (
    AssertCreate,
    SetLocationUpdate,
    SetPropertiesUpdate,
    TableRequirement,
    TableUpdate,
)
from pyiceberg.typedef import Identifier
from sqlalchemy import Engine, event, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tableflow_core.catalog.errors import (
    BadRequestError,
    StorageUnavailableError,
    UnprocessableEntityError,
)
from tableflow_core.catalog.locations import LOCATION_PROPERTIES, LocationPolicy
from tableflow_core.catalog.locks import TableLocks
from tableflow_core.catalog.metadata_cache import (
    DEFAULT_MAX_ENTRIES,
    MetadataCache,
    ParsedMetadata,
)
from tableflow_core.catalog.models import CreateTableBody
from tableflow_core.catalog.placement import (
    PlacedTable,
    check_placement,
    place_of,
    table_places,
)
from tableflow_core.catalog.purge import purge_files
from tableflow_core.catalog.transactions import stage_table
from tableflow_core.catalog.updates import (
    check_result,
    check_schema,
    check_transforms,
    checked_updates,
)
from tableflow_core.config.names import MAX_NAMESPACE_LEVELS, catalog_name_problem

log = logging.getLogger(__name__)

# SqlCatalog only knows a namespace exists while it has a property row; we always keep
# this one (pyiceberg's own minimal property) and never show it to clients.
NAMESPACE_MARKER = dict(IcebergNamespaceProperties.NAMESPACE_MINIMAL_PROPERTIES)


@dataclass(frozen=True)
class TableChange:
    """One table's part of a commit: requirements checked, then updates applied."""

    identifier: Identifier
    requirements: tuple[TableRequirement, ...]
    updates: tuple[TableUpdate, ...]


@dataclass(frozen=True)
class LoadedTable:
    parsed: ParsedMetadata
    metadata_location: str | None

    @classmethod
    def of(cls, metadata: TableMetadata, metadata_location: str | None) -> LoadedTable:
        return cls(ParsedMetadata(metadata), metadata_location)

    @property
    def metadata(self) -> TableMetadata:
        return self.parsed.metadata

    def metadata_json(self) -> str:
        return self.parsed.json()


@dataclass(frozen=True)
class PropertiesUpdate:
    updated: list[str]
    removed: list[str]
    missing: list[str]


@dataclass(frozen=True)
class _StagedCommit:
    identifier: Identifier
    previous_location: str | None
    staged: StagedTable  # the new metadata and where it goes
    previous: TableMetadata | None = None  # the metadata it replaces

    @property
    def unchanged(self) -> bool:
        return self.staged.metadata_location == self.previous_location


def open_sql_catalog(
    name: str,
    database_url: str,
    warehouse_uri: str,
    file_io_properties: Mapping[str, str] | None = None,
) -> SqlCatalog:
    """A SqlCatalog on `database_url` (sqlite:///... or postgresql+psycopg://...).

    `file_io_properties`: pyiceberg FileIO properties (an s3:// warehouse's endpoint,
    region and keys), used for every metadata read and write.
    """
    catalog = SqlCatalog(
        name, **{**(file_io_properties or {}), "uri": database_url, "warehouse": warehouse_uri}
    )
    if catalog.engine.dialect.name == "sqlite":
        _tune_sqlite(catalog.engine)
    return catalog


def _tune_sqlite(engine: Engine) -> None:
    """WAL (readers never block the writer) and waiting, not failing, on a busy database."""

    @event.listens_for(engine, "connect")
    def _set_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    # SqlCatalog already opened a connection before the listener existed.
    engine.dispose()


def validate_namespace(namespace: Identifier) -> Identifier:
    if not namespace:
        raise BadRequestError("Namespace must have at least one non-empty level")
    if len(namespace) > MAX_NAMESPACE_LEVELS:
        raise BadRequestError(f"Namespace has more than {MAX_NAMESPACE_LEVELS} levels")
    for level in namespace:
        if problem := catalog_name_problem(level):
            raise BadRequestError(f"Invalid namespace level: {problem}")
    return namespace


def validate_table_name(name: str) -> str:
    if problem := catalog_name_problem(name):
        raise BadRequestError(f"Invalid table name: {problem}")
    return name


def validate_identifier(identifier: Identifier) -> Identifier:
    validate_namespace(identifier[:-1])
    validate_table_name(identifier[-1])
    return identifier


class CatalogService:
    """Everything the REST routes do, as plain method calls."""

    def __init__(
        self,
        catalog: SqlCatalog,
        locations: LocationPolicy | None = None,
        metadata_cache_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> None:
        self.catalog = catalog
        self.locations = locations or LocationPolicy.for_warehouse(catalog.properties["warehouse"])
        self._locks = TableLocks()
        self._metadata = MetadataCache(metadata_cache_entries)
        # Held from a placement check to the database write it allows (catalog/placement.py).
        self._placement_lock = threading.RLock()
        self._places: dict[str, tuple[str, ...]] = {}  # metadata location -> places

    @classmethod
    def open(
        cls,
        database_url: str,
        warehouse_uri: str,
        name: str = "tableflow",
        allowed_locations: Sequence[str] = (),
        file_io_properties: Mapping[str, str] | None = None,
        metadata_cache_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> CatalogService:
        """`allowed_locations`: prefixes besides the warehouse where tables may live."""
        return cls(
            open_sql_catalog(name, database_url, warehouse_uri, file_io_properties),
            LocationPolicy.for_warehouse(warehouse_uri, allowed_locations),
            metadata_cache_entries,
        )

    def close(self) -> None:
        self.catalog.close()

    # -- namespaces -------------------------------------------------------------------

    def list_namespaces(self, parent: Identifier = ()) -> list[Identifier]:
        if parent:
            validate_namespace(parent)
        return sorted(self.catalog.list_namespaces(parent))

    def create_namespace(self, namespace: Identifier, properties: dict[str, str]) -> dict[str, str]:
        validate_namespace(namespace)
        self._check_namespace_properties(properties)
        try:
            self.catalog.create_namespace(namespace, {**properties, **NAMESPACE_MARKER})
        except IntegrityError as exc:  # another process created it since pyiceberg's check
            raise NamespaceAlreadyExistsError(
                f"Namespace already exists: {'.'.join(namespace)}"
            ) from exc
        return self.load_namespace(namespace)

    def namespace_exists(self, namespace: Identifier) -> bool:
        return self.catalog.namespace_exists(validate_namespace(namespace))

    def load_namespace(self, namespace: Identifier) -> dict[str, str]:
        properties = self.catalog.load_namespace_properties(validate_namespace(namespace))
        return {k: v for k, v in properties.items() if NAMESPACE_MARKER.get(k) != v}

    def update_namespace_properties(
        self, namespace: Identifier, removals: Sequence[str], updates: dict[str, str]
    ) -> PropertiesUpdate:
        if overlap := set(removals) & set(updates):
            raise UnprocessableEntityError(f"Keys both updated and removed: {sorted(overlap)}")
        self._check_namespace_properties(updates)
        current = self.load_namespace(namespace)
        removable = [key for key in removals if key in current]
        missing = [key for key in removals if key not in current]
        self.catalog.update_namespace_properties(namespace, set(removable), updates)
        return PropertiesUpdate(updated=sorted(updates), removed=sorted(removable), missing=missing)

    def _check_namespace_properties(self, properties: dict[str, str]) -> None:
        if "location" in properties:
            self.locations.check(properties["location"], "namespace location")

    def drop_namespace(self, namespace: Identifier) -> None:
        self.catalog.drop_namespace(validate_namespace(namespace))

    # -- tables -----------------------------------------------------------------------

    def list_tables(self, namespace: Identifier) -> list[Identifier]:
        validate_namespace(namespace)
        if not self.catalog.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(namespace)}")
        return sorted(self.catalog.list_tables(namespace))

    def table_exists(self, identifier: Identifier) -> bool:
        return self.catalog.table_exists(validate_identifier(identifier))

    def load_table(self, identifier: Identifier) -> LoadedTable:
        with self._storage("reading the metadata of", validate_identifier(identifier)):
            loaded = self._current(identifier)
        if loaded is None:
            raise NoSuchTableError(f"Table does not exist: {'.'.join(identifier)}")
        return loaded

    def load_tables(self, identifiers: Sequence[Identifier]) -> dict[Identifier, LoadedTable]:
        """The tables of `identifiers` that exist, as `load_table` gives them, found with
        one database query per namespace (a plan of 1,000 tables asked 1,000 times)."""
        by_namespace: dict[Identifier, set[str]] = {}
        for identifier in identifiers:
            validate_identifier(identifier)
            by_namespace.setdefault(tuple(identifier[:-1]), set()).add(identifier[-1])
        found: dict[Identifier, LoadedTable] = {}
        for namespace, names in by_namespace.items():
            for name, location in self._metadata_locations(namespace, names).items():
                identifier = (*namespace, name)
                with self._storage("reading the metadata of", identifier):
                    parsed = self._metadata.get(location, self._read_metadata)
                found[identifier] = LoadedTable(parsed, location)
        return found

    def _metadata_locations(self, namespace: Identifier, names: set[str]) -> dict[str, str]:
        """Table name -> current metadata location, for the names of `names` that exist."""
        statement = select(IcebergTables.table_name, IcebergTables.metadata_location).where(
            IcebergTables.catalog_name == self.catalog.name,
            IcebergTables.table_namespace == Catalog.namespace_to_string(namespace),
        )
        if (type_filter := self.catalog._iceberg_type_filter()) is not None:
            statement = statement.where(type_filter)
        with self.catalog.engine.connect() as connection:
            rows = connection.execute(statement).all()
        return {name: location for name, location in rows if name in names and location}

    def _current(self, identifier: Identifier) -> LoadedTable | None:
        """The table as the database points at it now; its metadata parsed at most once."""
        location = self._metadata_location(identifier)
        if location is None:
            return None
        return LoadedTable(self._metadata.get(location, self._read_metadata), location)

    def _metadata_location(self, identifier: Identifier) -> str | None:
        statement = select(IcebergTables.metadata_location).where(
            IcebergTables.catalog_name == self.catalog.name,
            IcebergTables.table_namespace == Catalog.namespace_to_string(identifier[:-1]),
            IcebergTables.table_name == identifier[-1],
        )
        if (type_filter := self.catalog._iceberg_type_filter()) is not None:
            statement = statement.where(type_filter)
        with self.catalog.engine.connect() as connection:
            location = connection.execute(statement).scalar_one_or_none()
        return location or None

    def _read_metadata(self, location: str) -> TableMetadata:
        io = load_file_io(self.catalog.properties, location)
        return FromInputFile.table_metadata(io.new_input(location))

    def _as_table(self, identifier: Identifier, loaded: LoadedTable) -> Table:
        assert loaded.metadata_location is not None
        io = load_file_io(
            {**self.catalog.properties, **loaded.metadata.properties}, loaded.metadata_location
        )
        return Table(identifier, loaded.metadata, loaded.metadata_location, io, self.catalog)

    def create_table(self, namespace: Identifier, request: CreateTableBody) -> LoadedTable:
        """Create a table, or with `stage-create` only return its would-be metadata.

        A staged table is created for real by a later commit with `assert-create`.
        """
        identifier = (*validate_namespace(namespace), validate_table_name(request.name))
        if not self.catalog.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(namespace)}")
        if self.catalog.table_exists(identifier):
            raise TableAlreadyExistsError(f"Table already exists: {'.'.join(identifier)}")
        spec = request.partition_spec or UNPARTITIONED_PARTITION_SPEC
        order = request.write_order or UNSORTED_SORT_ORDER
        self._check_new_table(request)
        # Resolved here (the namespace's `location` or the warehouse) so the final
        # location is checked too, also for namespaces created before locations were.
        location = self.locations.check(
            self.catalog._resolve_table_location(
                request.location, Catalog.namespace_to_string(namespace), request.name
            ),
            "table location",
        )
        # The metadata file is written under it: checked as a file path (links resolved).
        metadata_file = load_location_provider(
            location, request.properties
        ).new_table_metadata_file_location()
        self.locations.check(metadata_file, "table metadata location")
        metadata = new_table_metadata(
            location=location,
            schema=request.table_schema,
            partition_spec=spec,
            sort_order=order,
            properties=request.properties,
        )
        if request.stage_create:
            self._check_placement(identifier, metadata, "table location")
            return LoadedTable.of(metadata, None)
        # SqlCatalog.create_table's steps, without its closing load_table: reading back
        # and parsing the file just written was a third of a create's CPU (1,000 tables).
        with (
            self._locks.holding([identifier]),
            self._placement_lock,
            self._storage("creating", identifier),
        ):
            self._check_placement(identifier, metadata, "table location")
            io = load_file_io(self.catalog.properties, metadata_file)
            self.catalog._write_metadata(metadata, io, metadata_file)
            row = self.catalog._create_table_row(
                Catalog.namespace_to_string(namespace), request.name, metadata_file
            )
            try:
                with Session(self.catalog.engine) as session:
                    session.execute(insert(IcebergTables).values(**row))
                    session.commit()
            except IntegrityError as exc:
                with contextlib.suppress(Exception):
                    io.delete(metadata_file)
                raise TableAlreadyExistsError(
                    f"Table already exists: {'.'.join(identifier)}"
                ) from exc
        created = LoadedTable.of(metadata, metadata_file)
        self._metadata.put(metadata_file, created.parsed)
        return created

    def _check_new_table(self, request: CreateTableBody) -> None:
        check_schema(request.table_schema)
        if request.location is not None:
            self.locations.check(request.location, "table location")
        self.locations.check_properties(request.properties, "table")
        if request.partition_spec is not None:
            check_transforms(
                request.table_schema,
                [
                    (f.source_id, f.transform, f"partition field {f.name!r}")
                    for f in request.partition_spec.fields
                ],
                "partition-spec",
            )
        if request.write_order is not None:
            check_transforms(
                request.table_schema,
                [(f.source_id, f.transform, "sort field") for f in request.write_order.fields],
                "write-order",
            )

    def _check_registrable(self, metadata_location: str) -> TableMetadata:
        """The file is inside the warehouse and holds table metadata that stays there too.

        Every failure to read it gets the same answer, so whether a file exists
        (inside the warehouse) is not told apart from it being invalid.
        """
        self.locations.check(metadata_location, "metadata-location")
        try:
            io = load_file_io(self.catalog.properties, metadata_location)
            metadata = FromInputFile.table_metadata(io.new_input(metadata_location))
        except Exception:
            raise BadRequestError(
                "metadata-location is not a readable Iceberg table metadata file"
            ) from None
        self.locations.check(metadata.location, "the registered table's location")
        self.locations.check_properties(metadata.properties, "the registered table's")
        # Files the catalog may read or (on purge) delete later.
        named = [
            *(s.manifest_list for s in metadata.snapshots if s.manifest_list),
            *(entry.metadata_file for entry in metadata.metadata_log),
            *(s.statistics_path for s in metadata.statistics),
            *(s.statistics_path for s in metadata.partition_statistics),
        ]
        for path in named:
            self.locations.check(path, "a file the registered metadata names")
        return metadata

    def register_table(
        self, namespace: Identifier, name: str, metadata_location: str, overwrite: bool
    ) -> LoadedTable:
        identifier = (*validate_namespace(namespace), validate_table_name(name))
        metadata = self._check_registrable(metadata_location)
        # A file registered again may have been rewritten in place (not by this catalog).
        self._metadata.discard(metadata_location)
        with self._locks.holding([identifier]), self._placement_lock:
            if not overwrite and self.catalog.table_exists(identifier):
                raise TableAlreadyExistsError(f"Table already exists: {'.'.join(identifier)}")
            self._check_placement(identifier, metadata, "the registered table's location")
            if overwrite and self.catalog.table_exists(identifier):
                self._set_metadata_location(identifier, metadata_location)
                return self.load_table(identifier)
            table = self.catalog.register_table(identifier, metadata_location)
        return LoadedTable.of(table.metadata, table.metadata_location)

    def drop_table(self, identifier: Identifier, purge: bool) -> None:
        """Drop the table; with `purge`, then delete its own files (`catalog/purge.py`)."""
        validate_identifier(identifier)
        with self._locks.holding([identifier]):
            loaded = self._current(identifier) if purge else None
            self.catalog.drop_table(identifier)
        if loaded is not None and loaded.metadata_location is not None:
            io = self._as_table(identifier, loaded).io
            with self._placement_lock:
                others = self._placed_tables(excluding=[identifier])
            purge_files(loaded.metadata, loaded.metadata_location, io, self.locations, others)

    def rename_table(self, source: Identifier, destination: Identifier) -> None:
        validate_identifier(source)
        validate_identifier(destination)
        with self._locks.holding([source, destination]):
            if not self.catalog.table_exists(source):
                raise NoSuchTableError(f"Table does not exist: {'.'.join(source)}")
            self.catalog.rename_table(source, destination)

    # -- commits ----------------------------------------------------------------------

    def commit_table(self, change: TableChange) -> LoadedTable:
        return self.commit_tables([change])[0]

    def commit_tables(self, changes: Sequence[TableChange]) -> list[LoadedTable]:
        """Apply every change or none.

        Under the tables' locks: check each change's requirements against the current
        metadata, write the new metadata files, then swap all metadata locations in one
        database transaction (compare-and-swap on the previous location).
        """
        identifiers = [validate_identifier(change.identifier) for change in changes]
        if len(set(identifiers)) != len(identifiers):
            raise BadRequestError("A transaction may change each table only once")
        places = any(_may_move(change) for change in changes)
        with (
            self._locks.holding(identifiers),
            self._placement_lock if places else contextlib.nullcontext(),
        ):
            staged = [self._stage(change, places) for change in changes]
            written = [s for s in staged if not s.unchanged]
            for commit in written:
                # The location was checked; a link created under it since must not lead out.
                self.locations.check(commit.staged.metadata_location, "table metadata location")
            for commit in written:
                with self._storage("writing the metadata of", commit.identifier):
                    self.catalog._write_metadata(
                        commit.staged.metadata, commit.staged.io, commit.staged.metadata_location
                    )
            try:
                self._swap_metadata_locations(written)
            except Exception:
                self._delete_metadata_files(written)
                raise
        for commit in written:
            self._delete_superseded_metadata(commit)
        committed = [LoadedTable.of(s.staged.metadata, s.staged.metadata_location) for s in staged]
        for commit, loaded in zip(staged, committed, strict=True):
            if not commit.unchanged:
                self._metadata.put(commit.staged.metadata_location, loaded.parsed)
                # The superseded file is rarely read again: its entry would only push
                # current tables out (a run cycle commits 2-3 times per table).
                if commit.previous_location is not None:
                    self._metadata.discard(commit.previous_location)
        return committed

    @contextlib.contextmanager
    def _storage(self, doing: str, identifier: Identifier) -> Iterator[None]:
        """OSError from the warehouse's store -> 503 naming the store and the table."""
        try:
            yield
        except OSError as exc:
            warehouse = self.catalog.properties.get("warehouse", "the warehouse")
            raise StorageUnavailableError(
                f"storage error at {warehouse} while {doing} {'.'.join(identifier)}: {exc}"
            ) from exc

    def _stage(self, change: TableChange, check_places: bool = False) -> _StagedCommit:
        with self._storage("reading the metadata of", change.identifier):
            loaded = self._current(change.identifier)
        current = self._as_table(change.identifier, loaded) if loaded else None
        if current is None:
            if not any(isinstance(r, AssertCreate) for r in change.requirements):
                raise NoSuchTableError(f"Table does not exist: {'.'.join(change.identifier)}")
            namespace = validate_namespace(change.identifier[:-1])
            validate_table_name(change.identifier[-1])
            if not self.catalog.namespace_exists(namespace):
                raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(namespace)}")
        for requirement in change.requirements:
            # Requirements first: a stale client gets 409 CommitFailed, not a 400 below.
            requirement.validate(current.metadata if current else None)
        base = current.metadata if current else self.catalog._empty_table_metadata()
        updates = checked_updates(base, change.updates, self.locations)
        try:
            staged = stage_table(
                self.catalog, current, change.identifier, change.requirements, updates
            )
        except StopIteration:
            # pyiceberg's metadata.spec()/sort_order() when the default id names nothing.
            raise BadRequestError(
                "Invalid updates: the default partition spec or sort order does not exist"
            ) from None
        check_result(updates, staged.metadata, self.locations)
        if check_places:
            self._check_placement(change.identifier, staged.metadata, "table location")
        if current is not None and staged.metadata == current.metadata:
            # Nothing changed: keep the current file rather than write an identical one.
            staged = StagedTable(
                identifier=change.identifier,
                metadata=current.metadata,
                metadata_location=current.metadata_location,
                io=current.io,
                catalog=self.catalog,
            )
        previous = current.metadata_location if current else None
        return _StagedCommit(
            change.identifier, previous, staged, current.metadata if current else None
        )

    # -- placement (catalog/placement.py) ------------------------------------------

    def _check_placement(self, identifier: Identifier, metadata: TableMetadata, what: str) -> None:
        """The table's places overlap no other table's, nor a root or namespace folder."""
        check_placement(
            table_places(metadata.location, metadata.properties),
            self._placed_tables(excluding=[identifier]),
            self.locations.prefixes,
            self._namespace_folders(),
            what,
        )

    def _placed_tables(self, excluding: Collection[Identifier]) -> list[PlacedTable]:
        """Every table's places but those of `excluding` (one query; each metadata file
        read once per location it has, then remembered)."""
        statement = select(
            IcebergTables.table_namespace,
            IcebergTables.table_name,
            IcebergTables.metadata_location,
        ).where(IcebergTables.catalog_name == self.catalog.name)
        if (type_filter := self.catalog._iceberg_type_filter()) is not None:
            statement = statement.where(type_filter)
        with self.catalog.engine.connect() as connection:
            rows = connection.execute(statement).all()
        current = {location for _, _, location in rows if location}
        self._places = {k: v for k, v in self._places.items() if k in current}
        placed = []
        for namespace, name, location in rows:
            identifier = (*Catalog.identifier_to_tuple(namespace), name)
            if location and identifier not in excluding:
                placed.append(PlacedTable(identifier, self._places_at(location)))
        return placed

    def _places_at(self, metadata_location: str) -> tuple[str, ...]:
        places = self._places.get(metadata_location)
        if places is None:
            try:
                metadata = self._metadata.get(metadata_location, self._read_metadata).metadata
                places = table_places(metadata.location, metadata.properties)
            except Exception as exc:  # an unreadable or odd table must not block the others
                log.warning("placement: cannot read %s: %s", metadata_location, exc)
                return ()
            self._places[metadata_location] = places
        return places

    def _namespace_folders(self) -> list[str]:
        """Where each namespace's tables go by default: its `location`, else
        `<warehouse>/<namespace>` (pyiceberg's convention)."""
        statement = select(
            IcebergNamespaceProperties.namespace,
            IcebergNamespaceProperties.property_key,
            IcebergNamespaceProperties.property_value,
        ).where(IcebergNamespaceProperties.catalog_name == self.catalog.name)
        with self.catalog.engine.connect() as connection:
            rows = connection.execute(statement).all()
        warehouse = self.catalog.properties["warehouse"].rstrip("/")
        folders: set[str] = set()
        for namespace, key, value in rows:
            named = [f"{warehouse}/{namespace}"]
            if key == "location" and value:
                named.append(value)
            for folder in named:
                with contextlib.suppress(BadRequestError):
                    folders.add(place_of(folder))
        return sorted(folders)

    def _swap_metadata_locations(self, commits: Sequence[_StagedCommit]) -> None:
        with Session(self.catalog.engine) as session:
            for commit in commits:
                namespace = Catalog.namespace_to_string(commit.identifier[:-1])
                table_name = commit.identifier[-1]
                new_location = commit.staged.metadata_location
                if commit.previous_location is None:
                    row = self.catalog._create_table_row(namespace, table_name, new_location)
                    try:
                        session.execute(insert(IcebergTables).values(**row))
                    except IntegrityError as exc:
                        raise TableAlreadyExistsError(
                            f"Table already exists: {namespace}.{table_name}"
                        ) from exc
                    continue
                result = session.execute(
                    update(IcebergTables)
                    .where(
                        IcebergTables.catalog_name == self.catalog.name,
                        IcebergTables.table_namespace == namespace,
                        IcebergTables.table_name == table_name,
                        IcebergTables.metadata_location == commit.previous_location,
                    )
                    .values(
                        metadata_location=new_location,
                        previous_metadata_location=commit.previous_location,
                    )
                )
                if result.rowcount != 1:  # type: ignore[attr-defined]
                    raise CommitFailedException(
                        f"Table {namespace}.{table_name} was changed by another process"
                    )
            session.commit()

    def _set_metadata_location(self, identifier: Identifier, metadata_location: str) -> None:
        namespace = Catalog.namespace_to_string(identifier[:-1])
        with Session(self.catalog.engine) as session:
            session.execute(
                update(IcebergTables)
                .where(
                    IcebergTables.catalog_name == self.catalog.name,
                    IcebergTables.table_namespace == namespace,
                    IcebergTables.table_name == identifier[-1],
                )
                .values(metadata_location=metadata_location)
            )
            session.commit()

    def _delete_superseded_metadata(self, commit: _StagedCommit) -> None:
        """With `write.metadata.delete-after-commit.enabled`, the metadata files the commit
        pushed out of the table's metadata log (it keeps
        `write.metadata.previous-versions-max`) are deleted, as Iceberg's Java catalogs
        do after a commit: here for every client, Spark's REST client included (it leaves
        that to the server). Best effort: a file that cannot be deleted is logged and
        left to orphan removal; the commit stands."""
        if commit.previous is None:
            return
        new = commit.staged.metadata
        enabled = new.properties.get("write.metadata.delete-after-commit.enabled", "false")
        if enabled.strip().lower() != "true":
            return
        kept = {entry.metadata_file for entry in new.metadata_log}
        gone = {entry.metadata_file for entry in commit.previous.metadata_log} - kept
        table_root = new.location.rstrip("/") + "/"
        for location in sorted(gone):
            # Only the table's own files, inside the warehouse: a registered table's
            # metadata log could name any path.
            if not location.startswith(table_root) or not self.locations.allows(location):
                continue
            try:
                commit.staged.io.delete(location)
            except FileNotFoundError:
                continue
            except Exception as exc:
                log.warning("could not delete superseded metadata file %s: %s", location, exc)

    def _delete_metadata_files(self, commits: Sequence[_StagedCommit]) -> None:
        """Best effort: metadata files of a failed commit are never referenced."""
        for commit in commits:
            location = commit.staged.metadata_location
            with contextlib.suppress(Exception):
                load_file_io(self.catalog.properties, location).delete(location)


def _may_move(change: TableChange) -> bool:
    """Whether the change may create the table or move one of its places."""
    return any(isinstance(r, AssertCreate) for r in change.requirements) or any(
        isinstance(u, SetLocationUpdate)
        or (isinstance(u, SetPropertiesUpdate) and any(k in u.updates for k in LOCATION_PROPERTIES))
        for u in change.updates
    )
