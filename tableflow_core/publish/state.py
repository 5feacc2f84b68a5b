"""Which published pointers are missing or stale: pure, from pointers read elsewhere."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from tableflow_core.config.project import Table

PointerStatus = Literal["current", "stale", "missing"]


@dataclass(frozen=True)
class PointerState:
    table: str
    catalog: str  # the name in the target's publish_catalogs
    identifier: str  # namespace.table in that catalog
    status: PointerStatus
    published: str | None  # the metadata location that catalog points at (None: not registered)
    current: str | None  # the table's own current metadata location

    @property
    def needs_publish(self) -> bool:
        return self.status != "current"

    def describe(self) -> str:
        where = f"{self.identifier} in catalog {self.catalog}"
        if self.status == "missing":
            return f"register {where} (not published yet)"
        if self.status == "stale":
            return f"update {where}: points at {self.published}, table is at {self.current}"
        return f"{where} is current"


def published_state(
    table: Table,
    current_metadata_location: str | None,
    published: Mapping[str, str | None],
) -> list[PointerState]:
    """One state per catalog in `table.publish_to`; `published` maps catalog name to the
    pointer read from it (absent or None: not registered). A table that does not exist
    yet (`current_metadata_location` None) has nothing to publish: every entry is current
    if nothing is registered, stale otherwise."""
    states = []
    for catalog in table.publish_to:
        pointer = published.get(catalog)
        status: PointerStatus
        if pointer == current_metadata_location:
            status = "current"
        elif pointer is None:
            status = "missing"
        else:
            status = "stale"
        states.append(
            PointerState(
                table.name, catalog, table.identifier, status, pointer, current_metadata_location
            )
        )
    return states
