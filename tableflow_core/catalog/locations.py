"""Where the catalog lets clients put files: inside the warehouse (or configured prefixes).

Every location a client names (a table or namespace `location`, `set-location`,
`write.*.path` properties, a manifest list, a statistics file, a metadata file to
register) is checked before the server touches it. A refused location gets one answer
whatever is at that path, so a client learns nothing about files outside the warehouse.

Local (`file://`) locations are compared after resolving symbolic links (the warehouse
and the allowed prefixes too): a link inside the warehouse that points outside it does
not make the outside a place for tables. The server checks again each file it writes or
deletes, right before it does; a link swapped in between that check and the write is
not caught (no portable way to write through a path without following links).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from tableflow_core.catalog.errors import BadRequestError
from tableflow_core.config.names import POLICY_WILDCARDS, invisible_character

# Table properties that move where Iceberg writers put files.
LOCATION_PROPERTIES = (
    "write.metadata.path",
    "write.data.path",
    "write.folder-storage.path",
    "write.object-storage.path",
)
_LOCAL_SCHEMES = ("", "file")


class LocationNotAllowedError(BadRequestError):
    """A location outside the warehouse (HTTP 400; the message never echoes file state)."""


@dataclass(frozen=True)
class LocationPolicy:
    """The prefixes (normalized URIs ending in '/') a location must fall under."""

    prefixes: tuple[str, ...]

    @classmethod
    def for_warehouse(cls, warehouse_uri: str, extra: Iterable[str] = ()) -> LocationPolicy:
        prefixes = []
        for prefix in (warehouse_uri, *extra):
            normalized = normalize_location(prefix)
            if normalized is None:
                raise ValueError(f"invalid allowed location prefix {prefix!r}")
            prefixes.append(resolve_links(normalized).rstrip("/") + "/")
        return cls(tuple(prefixes))

    def allows(self, location: str) -> bool:
        normalized = normalize_location(location)
        if normalized is None:
            return False
        candidate = resolve_links(normalized).rstrip("/") + "/"
        return any(candidate.startswith(prefix) for prefix in self.prefixes)

    def check(self, location: str, what: str) -> str:
        """`location` if allowed; else LocationNotAllowedError naming `what`, not the path."""
        if isinstance(location, str) and has_policy_wildcard(location):
            raise LocationNotAllowedError(
                f"{what} is not allowed: locations cannot contain '*', '?' or '$' "
                "(wildcards of the storage access policies)"
            )
        if not isinstance(location, str) or not self.allows(location):
            raise LocationNotAllowedError(
                f"{what} is not allowed: locations must be inside the catalog's warehouse"
            )
        return location

    def check_properties(self, properties: Mapping[str, str], what: str) -> None:
        for key in LOCATION_PROPERTIES:
            if key in properties:
                self.check(properties[key], f"{what} property {key}")


def resolve_links(normalized: str) -> str:
    """A normalized `file://` location with its symbolic links resolved (the part of the
    path that exists); other schemes unchanged."""
    if not normalized.startswith("file://"):
        return normalized
    return "file://" + os.path.realpath(normalized.removeprefix("file://"))


def has_policy_wildcard(location: str) -> bool:
    """`location` holds an IAM wildcard, also percent-encoded (`%2A`)."""
    return any(c in POLICY_WILDCARDS for c in location + unquote(location))


def normalize_location(location: str) -> str | None:
    """`file:///a/b/../c` and `/a/c` -> `file:///a/c`; other schemes kept as `scheme://host/path`.

    None for what cannot be compared safely: relative paths, `..` segments, control,
    format or line separator characters, IAM policy wildcards (`*`, `?`, `$`), a
    `file://` URI naming another host.
    """
    if not location or invisible_character(location) or has_policy_wildcard(location):
        return None
    parsed = urlparse(location)
    scheme = parsed.scheme.lower()
    path = unquote(parsed.path)
    if invisible_character(path) or "\\" in path:
        return None
    if ".." in path.split("/") or parsed.query or parsed.fragment or parsed.params:
        return None
    if scheme in _LOCAL_SCHEMES:
        if parsed.netloc not in ("", "localhost") or not path.startswith("/"):
            return None
        return "file://" + posixpath.normpath(path).replace("//", "/")
    if not parsed.netloc:
        return None
    return f"{scheme}://{parsed.netloc}{posixpath.normpath(path) if path else ''}"
