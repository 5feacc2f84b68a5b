"""What every catalog publisher does."""

from __future__ import annotations

from typing import Any, Protocol


class CatalogPublisher(Protocol):
    """A connection to one publish catalog. `namespace` and `table` name the table there."""

    def current_pointer(self, namespace: tuple[str, ...], table: str) -> str | None:
        """The metadata location the catalog holds for the table (None: not registered)."""
        ...

    def register(self, namespace: tuple[str, ...], table: str, metadata_location: str) -> None:
        """Register a table that is not in the catalog (creating its namespace if needed)."""
        ...

    def update(
        self, namespace: tuple[str, ...], table: str, metadata_location: str, previous: str
    ) -> None:
        """Point the table at `metadata_location`; raise PublishConflictError when the
        catalog no longer holds `previous` (where the catalog can check it)."""
        ...

    def close(self) -> None: ...


class PyicebergRegistration:
    """`register` for a publisher over a pyiceberg catalog (`self.catalog`): REST, SQL."""

    catalog: Any

    def register(self, namespace: tuple[str, ...], table: str, metadata_location: str) -> None:
        self.catalog.create_namespace_if_not_exists(namespace)
        self.catalog.register_table((*namespace, table), metadata_location)
