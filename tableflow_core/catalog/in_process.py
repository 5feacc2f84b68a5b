"""A REST catalog client whose table commits go straight to an in-process server.

When plan/apply run the embedded catalog on a thread of their own process, every
pyiceberg commit of the driver was an HTTP request to that same process: the request's
JSON written and parsed, the whole new metadata written as the response's JSON and
parsed again by the client, each step competing for the one GIL with the server's event
loop. A run commits twice per table (`engine/run_branch.py`), so 1,000 small tables
paid that 2,000 times. Here `commit_table` calls the server's `CatalogService` instead:
the same locks, requirement checks, metadata file and database swap as the HTTP route,
and pyiceberg's exceptions as pyiceberg's REST client raises them for the route's
status codes. On a local (file://) warehouse, whose load answers carry no storage
configuration or credentials, `load_table` reads through the service too (the run's
`_load` before its branch, 1,000 requests per cycle). Everything else (loads from an
object-store warehouse with their storage configuration and vended keys, Spark's
requests) still goes through HTTP.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    BadRequestError,
    CommitFailedException,
    CommitStateUnknownException,
    ForbiddenError,
    NoSuchTableError,
    RESTError,
    ServerError,
    ServiceUnavailableError,
    UnauthorizedError,
)
from pyiceberg.io import load_file_io
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import Identifier

from tableflow_core.catalog.errors import error_info_for
from tableflow_core.catalog.service import CatalogService, TableChange

# The exception pyiceberg's RestCatalog.commit_table raises for each status the route
# answers (its own mapping, pyiceberg/catalog/rest/__init__.py).
_CLIENT_ERRORS: dict[int, type[Exception]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NoSuchTableError,
    409: CommitFailedException,
    503: ServiceUnavailableError,
}


class OwnServerCatalog(RestCatalog):
    """pyiceberg's RestCatalog for tableflow's own catalog server, which deletes the
    metadata files a commit pushed out of the table's metadata log itself (for every
    client: Spark's REST client never does). pyiceberg's client would delete the same
    files again after each commit and log a warning for each one already gone."""

    @staticmethod
    def _delete_old_metadata(io: Any, base: Any, metadata: Any) -> None:
        return None


class InProcessRestCatalog(OwnServerCatalog):
    """pyiceberg's RestCatalog, committing through `service` (the server it talks to,
    running in this process) instead of a request to it."""

    def __init__(
        self, name: str, service: CatalogService, *, direct_loads: bool, **properties: Any
    ) -> None:
        """`direct_loads`: the server's load answers carry no table config (its warehouse
        is local), so a table loaded from the service is the one HTTP would give."""
        super().__init__(name, **properties)
        self._service = service
        self._direct_loads = direct_loads

    def load_table(self, identifier: str | Identifier) -> Table:
        if not self._direct_loads:
            return super().load_table(identifier)
        return table_from_service(
            self._service, self.identifier_to_tuple(identifier), self, self.properties
        )

    def commit_table(
        self,
        table: Table,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> CommitTableResponse:
        change = TableChange(table.name(), tuple(requirements), tuple(updates))
        try:
            committed = self._service.commit_table(change)
        except Exception as exc:
            raise client_error(exc) from exc
        return CommitTableResponse(
            metadata=committed.metadata, metadata_location=committed.metadata_location
        )


def table_from_service(
    service: CatalogService, identifier: Identifier, catalog: Any, properties: dict[str, str]
) -> Table:
    """The table `identifier` loaded by `service`, as pyiceberg's REST client makes it from
    a load answer with an empty config (`RestCatalog._response_to_table`): its FileIO from
    the catalog's `properties` and the table's own; pyiceberg's exceptions."""
    try:
        loaded = service.load_table(identifier)
    except Exception as exc:
        raise client_error(exc, load=True) from exc
    assert loaded.metadata_location is not None
    return Table(
        identifier=identifier,
        metadata_location=loaded.metadata_location,
        metadata=loaded.metadata,
        io=load_file_io({**properties, **loaded.metadata.properties}, loaded.metadata_location),
        catalog=catalog,
        config={},
    )


def client_error(exc: Exception, *, load: bool = False) -> Exception:
    """The exception the REST client would have raised for the route's answer to `exc`
    (a commit's, or with `load` a load's)."""
    if isinstance(exc, CommitFailedException | NoSuchTableError):
        return exc
    info = error_info_for(exc)
    if info is None:  # a 500: unknown state after a commit, a server error after a load
        unknown = ServerError if load else CommitStateUnknownException
        return unknown(f"{type(exc).__name__}: {exc}")
    return _CLIENT_ERRORS.get(info.status, RESTError)(f"{info.type}: {info.message}")
