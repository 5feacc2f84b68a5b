"""A REST catalog client whose table commits go straight to an in-process server.

When plan/apply run the embedded catalog on a thread of their own process, every
pyiceberg commit of the driver was an HTTP request to that same process: the request's
JSON written and parsed, the whole new metadata written as the response's JSON and
parsed again by the client, each step competing for the one GIL with the server's event
loop. A run commits twice per table (`engine/run_branch.py`), so 1,000 small tables
paid that 2,000 times. Here `commit_table` calls the server's `CatalogService` instead:
the same locks, requirement checks, metadata file and database swap as the HTTP route,
and pyiceberg's exceptions as pyiceberg's REST client raises them for the route's
status codes. Everything else (loads with their storage configuration, Spark's
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
    ServiceUnavailableError,
    UnauthorizedError,
)
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.update import TableRequirement, TableUpdate

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


class InProcessRestCatalog(RestCatalog):
    """pyiceberg's RestCatalog, committing through `service` (the server it talks to,
    running in this process) instead of a request to it."""

    def __init__(self, name: str, service: CatalogService, **properties: Any) -> None:
        super().__init__(name, **properties)
        self._service = service

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
            raise _client_error(exc) from exc
        return CommitTableResponse(
            metadata=committed.metadata, metadata_location=committed.metadata_location
        )


def _client_error(exc: Exception) -> Exception:
    """The exception the REST client would have raised for the route's answer to `exc`."""
    if isinstance(exc, CommitFailedException | NoSuchTableError):
        return exc
    info = error_info_for(exc)
    if info is None:  # the route answers 500, which the client reports as unknown state
        return CommitStateUnknownException(f"{type(exc).__name__}: {exc}")
    return _CLIENT_ERRORS.get(info.status, RESTError)(f"{info.type}: {info.message}")
