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
`_load` before its branch, 1,000 requests per cycle). The reads that carry no storage
configuration (listing namespaces and tables, whether one exists, a namespace's
properties) are answered by the service on any warehouse. The two requests pyiceberg's
client opens with (the catalog's config, an access token), and table creations on a
local warehouse, are answered here too (`catalog/answers.py`), so a command that needs
nothing else from the server never starts it (`serve_in_background(...,
on_first_connection=True)`). Everything else (loads from an object-store warehouse with
their storage configuration and vended keys, Spark's requests) still goes through HTTP.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    BadRequestError,
    CommitFailedException,
    CommitStateUnknownException,
    ForbiddenError,
    NoSuchNamespaceError,
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
from requests import PreparedRequest, Response, Session
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict

from tableflow_core.catalog.answers import (
    Answer,
    config_answer,
    local_create_table_answer,
    parse_namespace,
    token_answer,
    token_authority,
)
from tableflow_core.catalog.clients import CONFIG_PATH, TOKEN_PATH
from tableflow_core.catalog.errors import error_info_for
from tableflow_core.catalog.service import CatalogService, TableChange
from tableflow_core.catalog.settings import CatalogServerSettings

T = TypeVar("T")

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


class ServiceReads:
    """The catalog reads that carry no storage configuration, answered by `_service` (the
    server's, in this process) as pyiceberg's REST client answers them from its routes."""

    _service: CatalogService

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        parent = Catalog.identifier_to_tuple(namespace)
        return answered_read(lambda: self._service.list_namespaces(parent))

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        namespace_tuple = Catalog.identifier_to_tuple(namespace)
        return answered_read(lambda: self._service.list_tables(namespace_tuple))

    def namespace_exists(self, namespace: str | Identifier) -> bool:
        namespace_tuple = Catalog.identifier_to_tuple(namespace)
        return answered_read(lambda: self._service.namespace_exists(namespace_tuple))

    def load_namespace_properties(self, namespace: str | Identifier) -> dict[str, str]:
        namespace_tuple = Catalog.identifier_to_tuple(namespace)
        return answered_read(lambda: self._service.load_namespace(namespace_tuple))

    def table_exists(self, identifier: str | Identifier) -> bool:
        identifier_tuple = Catalog.identifier_to_tuple(identifier)
        return answered_read(lambda: self._service.table_exists(identifier_tuple))


class InProcessRestCatalog(ServiceReads, OwnServerCatalog):
    """pyiceberg's RestCatalog, committing through `service` (the server it talks to,
    running in this process) instead of a request to it."""

    def __init__(
        self,
        name: str,
        service: CatalogService,
        settings: CatalogServerSettings,
        **properties: Any,
    ) -> None:
        """`settings`: the server's. Without a storage block its warehouse is local and its
        load answers carry no table config, so a table loaded from the service is the one
        HTTP would give (`_direct_loads`)."""
        self._service = service
        self._direct_loads = settings.storage is None
        self._answers = InProcessAnswers(settings, service if self._direct_loads else None)
        super().__init__(name, **properties)  # fetches the config (and a token): see below

    def _config_headers(self, session: Session) -> None:
        # The first thing pyiceberg does to each session it makes, before the token and
        # config requests: from here on the server's URI goes through the adapter.
        super()._config_headers(session)
        session.mount(self.uri.rstrip("/") + "/", self._answers)

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


def answered_read(call: Callable[[], T]) -> T:
    """A read `call` on the service, raising what pyiceberg's REST client raises for the
    route's answer to it."""
    try:
        return call()
    except (NoSuchNamespaceError, NoSuchTableError):
        raise  # as the client raises them for the route's 404
    except Exception as exc:
        raise client_error(exc, load=True) from exc


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


class InProcessAnswers(HTTPAdapter):
    """requests' transport for the in-process server's URI: the config and token requests,
    and with `service` (a local warehouse: answers carry no storage configuration) table
    creations, answered in this process as the server's routes answer them
    (`catalog/answers.py`); every other request sent over HTTP (the server starts on its
    first connection)."""

    def __init__(self, settings: CatalogServerSettings, service: CatalogService | None) -> None:
        super().__init__()
        authority = token_authority(settings)
        self._service = service
        self._answers: dict[tuple[str, str], Callable[[PreparedRequest], Answer]] = {
            ("GET", CONFIG_PATH): lambda _request: config_answer(settings),
            ("POST", TOKEN_PATH): lambda request: token_answer(
                authority, _body_bytes(request.body), request.headers.get("Authorization")
            ),
        }

    def send(self, request: PreparedRequest, *args: Any, **kwargs: Any) -> Response:
        path = urlsplit(request.url or "").path
        method = request.method or ""
        answer = self._answers.get((method, path))
        if answer is not None:
            return _response(request, answer(request))
        namespace = _created_in(path) if method == "POST" else None
        if namespace is not None and self._service is not None:
            body = _body_bytes(request.body)
            return _response(request, local_create_table_answer(self._service, namespace, body))
        return super().send(request, *args, **kwargs)


def _created_in(path: str) -> tuple[str, ...] | None:
    """The namespace of a create-table path (/v1/namespaces/{namespace}/tables)."""
    parts = path.split("/")
    if len(parts) != 5 or parts[:3] != ["", "v1", "namespaces"] or parts[4] != "tables":
        return None
    return parse_namespace(unquote(parts[3]))


def _body_bytes(body: bytes | str | None) -> bytes:
    if body is None:
        return b""
    return body.encode() if isinstance(body, str) else body


def _response(request: PreparedRequest, answer: Answer) -> Response:
    """`answer` as requests' Response to `request`."""
    response = Response()
    response.status_code = answer.status
    response._content = answer.text().encode()
    headers: Mapping[str, str] = {"Content-Type": "application/json", **answer.headers}
    response.headers = CaseInsensitiveDict(headers)
    response.encoding = "utf-8"
    response.url = request.url or ""
    response.request = request
    return response
