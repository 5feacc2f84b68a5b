"""Where a table may sit relative to the other tables: each table owns its places alone.

A table's *places* are its `location` and its `write.*.path` properties. A place may not
equal, contain or sit inside another table's place, nor be the warehouse root (or an
allowed prefix) or contain a namespace's folder: otherwise the table's vended
credentials (scoped to its location) read the other table's files, and a purge of it
could delete them. Checked when a table is created, registered, or commits a new
location or `write.*.path` property (`CatalogService`); a purge keeps every file under
another table's places (`catalog/purge.py`), also for tables placed before this rule.

Places are compared as `LocationPolicy` prefixes: normalized, links resolved, ending
in '/'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pyiceberg.typedef import Identifier

from tableflow_core.catalog.errors import BadRequestError
from tableflow_core.catalog.locations import (
    LOCATION_PROPERTIES,
    LocationNotAllowedError,
    LocationPolicy,
    normalize_location,
    resolve_links,
)


class LocationConflictError(BadRequestError):
    """A table's place overlaps another table's, the warehouse root or a namespace folder."""


def place_of(location: str) -> str:
    """`location` as a comparable prefix (normalized, links resolved, ending in '/')."""
    normalized = normalize_location(location)
    if normalized is None:
        raise LocationNotAllowedError(
            "location is not allowed: locations must be inside the catalog's warehouse"
        )
    return resolve_links(normalized).rstrip("/") + "/"


def table_places(location: str, properties: Mapping[str, str]) -> tuple[str, ...]:
    """The places of a table at `location` with `properties`."""
    named = [location, *(properties[key] for key in LOCATION_PROPERTIES if key in properties)]
    return tuple(dict.fromkeys(place_of(place) for place in named if place))


def table_policy(location: str, properties: Mapping[str, str]) -> LocationPolicy:
    """A policy allowing only the table's own places (what a purge or an expiry of its
    files may delete)."""
    return LocationPolicy(table_places(location, properties))


def overlaps(a: str, b: str) -> bool:
    """Places `a` and `b` are equal or one contains the other."""
    return a.startswith(b) or b.startswith(a)


@dataclass(frozen=True)
class PlacedTable:
    identifier: Identifier
    places: tuple[str, ...]


def placement_problem(
    places: Sequence[str],
    others: Iterable[PlacedTable],
    roots: Iterable[str],
    namespace_folders: Iterable[str],
) -> str | None:
    """Why a table with `places` cannot sit among `others`, or None.

    `roots`: the warehouse and allowed prefixes (a table may not be one);
    `namespace_folders`: folders of namespaces (a table may not be or contain one).
    """
    for place in places:
        if any(place == root for root in roots):
            return "a table's location cannot be the warehouse root or an allowed prefix"
        if any(folder.startswith(place) for folder in namespace_folders):
            return "a table's location cannot be or contain a namespace's folder"
    for other in others:
        for place in places:
            for theirs in other.places:
                if overlaps(place, theirs):
                    return (
                        f"a table's location cannot equal, contain or sit inside another "
                        f"table's: it overlaps table {'.'.join(other.identifier)}"
                    )
    return None


def check_placement(
    places: Sequence[str],
    others: Iterable[PlacedTable],
    roots: Iterable[str],
    namespace_folders: Iterable[str],
    what: str,
) -> None:
    if problem := placement_problem(places, others, roots, namespace_folders):
        raise LocationConflictError(f"{what} is not allowed: {problem}")
