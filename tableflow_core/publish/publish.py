"""Publishing one table's current metadata pointer to each catalog in its `publish_to`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from tableflow_core.config.models.catalogs import SqlCatalog
from tableflow_core.config.project import Project, Table
from tableflow_core.publish.base import CatalogPublisher
from tableflow_core.publish.errors import PublishConflictError, PublishError
from tableflow_core.publish.registry import open_publisher

PublishAction = Literal["registered", "updated", "unchanged", "error"]


@dataclass(frozen=True)
class PublishedEntry:
    catalog: str
    identifier: str
    action: PublishAction
    previous: str | None
    current: str
    error: str | None = None

    def describe(self) -> str:
        where = f"{self.identifier} in {self.catalog}"
        if self.action == "error":
            return f"{where}: failed: {self.error}"
        return f"{where}: {self.action}"


@dataclass(frozen=True)
class PublishResult:
    table: str
    metadata_location: str
    entries: tuple[PublishedEntry, ...]

    @property
    def ok(self) -> bool:
        return all(e.action != "error" for e in self.entries)

    def summary_line(self) -> str:
        return f"{self.table}: " + "; ".join(e.describe() for e in self.entries)


Opener = Callable[[str, object], CatalogPublisher]
# The FileIO properties a destination needs to read the source's files (object store
# address, region, keys), not the source catalog's own (uri, credential, type).
FILE_IO_PREFIXES = ("s3.", "client.")


def _publish_one(
    publisher: CatalogPublisher,
    table: Table,
    metadata_location: str,
    attempts: int,
    backoff_s: float,
) -> tuple[PublishAction, str | None]:
    for attempt in range(1, attempts + 1):
        pointer = publisher.current_pointer(table.namespace, table.table)
        try:
            if pointer == metadata_location:
                return "unchanged", pointer
            if pointer is None:
                publisher.register(table.namespace, table.table, metadata_location)
                return "registered", None
            publisher.update(table.namespace, table.table, metadata_location, pointer)
            return "updated", pointer
        except PublishConflictError:
            if attempt == attempts:
                raise
            time.sleep(backoff_s * attempt)
    raise AssertionError("unreachable")


def publish_table(
    project: Project,
    table: Table,
    current_metadata_location: str,
    *,
    attempts: int = 5,
    backoff_s: float = 0.2,
    opener: Opener = open_publisher,
    file_io: Mapping[str, str] | None = None,
) -> PublishResult:
    """Register or update `table`'s pointer in every catalog of its `publish_to`.

    No data is copied: the catalogs point at the table's own metadata file. A conflict
    (the pointer moved meanwhile) is retried after re-reading it. One catalog failing
    does not stop the others; its entry carries the (redacted) error. `file_io`: the
    source table's FileIO properties (an S3 endpoint and keys): a SQL catalog reads the
    metadata file it registers through pyiceberg here, with the same access.
    """
    entries = []
    for name in table.publish_to:
        config = project.target.publish_catalogs[name]
        if file_io and isinstance(config, SqlCatalog):
            access = {k: v for k, v in file_io.items() if k.startswith(FILE_IO_PREFIXES)}
            config = config.model_copy(update={"properties": {**access, **config.properties}})
        previous: str | None = None
        try:
            publisher = opener(name, config)
            try:
                action, previous = _publish_one(
                    publisher, table, current_metadata_location, attempts, backoff_s
                )
            finally:
                publisher.close()
            entries.append(
                PublishedEntry(name, table.identifier, action, previous, current_metadata_location)
            )
        except Exception as exc:
            entries.append(
                PublishedEntry(
                    name,
                    table.identifier,
                    "error",
                    previous,
                    current_metadata_location,
                    project.redact(f"{type(exc).__name__}: {exc}")[:500],
                )
            )
    return PublishResult(table.name, current_metadata_location, tuple(entries))


def read_published_pointers(
    project: Project, table: Table, *, opener: Opener = open_publisher
) -> dict[str, str | None]:
    """The pointer each catalog in `table.publish_to` holds (None: not registered)."""
    pointers: dict[str, str | None] = {}
    for name in table.publish_to:
        try:
            publisher = opener(name, project.target.publish_catalogs[name])
            try:
                pointers[name] = publisher.current_pointer(table.namespace, table.table)
            finally:
                publisher.close()
        except PublishError:
            raise
        except Exception as exc:
            raise PublishError(
                project.redact(f"publish catalog {name}: cannot read {table.identifier}: {exc}")
            ) from exc
    return pointers
