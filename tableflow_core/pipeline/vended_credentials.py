"""Vended storage credentials kept valid for pyiceberg's writers, in the driver and tasks.

A catalog that vends temporary credentials (`credentials: vended` with an STS role) hands
them out with each table it loads, with their expiry (`s3.session-token-expires-at-ms`)
and where to get new ones (`client.refresh-credentials-endpoint`, the REST spec's
`loadCredentials`). Iceberg's Java S3FileIO refreshes by itself; pyiceberg's FileIO does
not: a run whose Spark job or publish comes after the credentials it loaded expired would
fail its writes. So before the driver uses a table's FileIO, and before a task writes a
table's files, the credentials are fetched again from the catalog when less than
`REFRESH_MARGIN_SECONDS` of them is left.

A task reaches the catalog with the request headers of the driver's catalog client (its
bearer token, as Java's serialised FileIO carries the catalog session to the executors);
they never appear in a message or a representation.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import requests

from tableflow_core.errors import IngestError
from tableflow_core.pipeline.data_files import file_io_properties

EXPIRES_AT_MS = "s3.session-token-expires-at-ms"
REFRESH_ENDPOINT = "client.refresh-credentials-endpoint"
# STS' shortest session is 15 minutes: credentials with more left than this serve any one
# job or publish; shorter-lived ones (the test stack's) are fetched before every use.
REFRESH_MARGIN_SECONDS = 15 * 60
REQUEST_TIMEOUT_SECONDS = 30
# Headers of the catalog client a task needs to be let in (and to be vended keys).
_SHIPPED_HEADERS = ("authorization", "x-iceberg-access-delegation")


def expiring(properties: Mapping[str, str], now: float | None = None) -> bool:
    """Whether `properties` (a FileIO's) hold credentials with less than the margin left."""
    expires_at_ms = properties.get(EXPIRES_AT_MS)
    if not expires_at_ms:
        return False
    left = int(expires_at_ms) / 1000 - (time.time() if now is None else now)
    return left < REFRESH_MARGIN_SECONDS


@dataclass(frozen=True)
class CredentialRefresh:
    """How to get a table's credentials again from its catalog (picklable, for tasks)."""

    url: str
    location: str  # the table's location: the storage credential whose prefix covers it
    headers: tuple[tuple[str, str], ...] = field(repr=False)
    verify: bool | str = True

    @classmethod
    def of(cls, table: Any) -> CredentialRefresh | None:
        """The refresh of a loaded pyiceberg table; None unless its catalog vends
        credentials that expire and says where to refresh them."""
        properties = table.io.properties
        endpoint = properties.get(REFRESH_ENDPOINT)
        session = getattr(table.catalog, "_session", None)  # a RestCatalog's, with its auth
        if not endpoint or EXPIRES_AT_MS not in properties or session is None:
            return None
        url = urljoin(table.catalog.properties["uri"].rstrip("/") + "/", endpoint)
        prepared = session.prepare_request(requests.Request("GET", url))
        headers = tuple(
            (name, value)
            for name, value in prepared.headers.items()
            if name.lower() in _SHIPPED_HEADERS
        )
        verify = session.verify if isinstance(session.verify, bool | str) else True
        return cls(url=url, location=table.metadata.location, headers=headers, verify=verify)

    def current(self, properties: Mapping[str, str], now: float | None = None) -> dict[str, str]:
        """`properties` with credentials that have at least the margin left."""
        if not expiring(properties, now):
            return dict(properties)
        return {**properties, **self.load()}

    def load(self) -> dict[str, str]:
        """New credentials for the table's location, from the catalog."""
        try:
            response = requests.get(
                self.url,
                headers=dict(self.headers),
                timeout=REQUEST_TIMEOUT_SECONDS,
                verify=self.verify,
            )
        except requests.RequestException as exc:
            raise IngestError(
                f"the catalog's credential refresh at {self.url} could not be reached: "
                f"{type(exc).__name__}"
            ) from None
        if response.status_code != 200:
            raise IngestError(
                f"the catalog's credential refresh at {self.url} answered HTTP "
                f"{response.status_code}; the table's credentials expire"
            )
        return _covering(response.json().get("storage-credentials") or [], self.location)


def _covering(credentials: list[dict[str, Any]], location: str) -> dict[str, str]:
    """The config of the storage credential with the longest prefix of `location`."""
    inside = location.rstrip("/") + "/"  # a prefix names a folder: `<location>/`
    matching = [c for c in credentials if inside.startswith(str(c.get("prefix", "")))]
    if not matching:
        raise IngestError(f"the catalog vended no credentials for {location}")
    best = max(matching, key=lambda c: len(str(c.get("prefix", ""))))
    return {str(k): str(v) for k, v in (best.get("config") or {}).items()}


def refresh_table_io(table: Any) -> None:
    """Give `table` (pyiceberg) a FileIO with current credentials if its own expire soon."""
    from pyiceberg.io import load_file_io

    properties = file_io_properties(table.io.properties)
    if not expiring(properties):
        return
    refresh = CredentialRefresh.of(table)
    if refresh is not None:
        table.io = load_file_io({**properties, **refresh.load()}, table.metadata_location)
