"""HTTP routes of the Iceberg REST catalog (apache/iceberg open-api/rest-catalog-open-api.yaml).

Routes are thin: decode the path, call CatalogService, encode pyiceberg's response
models. Sync handlers run on FastAPI's thread pool; the service does the locking.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pyiceberg.catalog.rest import (
    ListNamespaceResponse,
    ListTableResponseEntry,
    ListTablesResponse,
    NamespaceResponse,
    UpdateNamespacePropertiesResponse,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

from tableflow_core.catalog.answers import (
    NAMESPACE_SEPARATOR,
    config_answer,
    error_answer,
    parse_namespace,
    table_json,
    token_answer,
    token_authority,
)
from tableflow_core.catalog.auth import PROOF_PATH, SERVER_KIND, bearer_token, server_proof
from tableflow_core.catalog.credentials import StsCredentialMinter
from tableflow_core.catalog.errors import (
    BadRequestError,
    ErrorInfo,
    NoSuchViewError,
    NotAuthorizedError,
    RequestTooLargeError,
    UnsupportedOperationError,
    error_info_for,
    handled_exception_types,
)
from tableflow_core.catalog.identity import ensure_server_key
from tableflow_core.catalog.models import (
    CommitTableBody,
    CommitTransactionBody,
    CreateNamespaceBody,
    CreateTableBody,
    RegisterTableBody,
    RenameTableBody,
    UpdateNamespacePropertiesBody,
)
from tableflow_core.catalog.service import CatalogService, LoadedTable, TableChange
from tableflow_core.catalog.settings import CatalogServerSettings
from tableflow_core.catalog.storage import ACCESS_DELEGATION_HEADER, VENDED_CREDENTIALS

log = logging.getLogger(__name__)

# Commit bodies carry metadata updates, a few MB at most; this only stops abuse.
MAX_BODY_BYTES = 64 * 1024 * 1024

# The request header by which a client asks for vended credentials (Iceberg REST spec).
AccessDelegation = Annotated[str | None, Header(alias=ACCESS_DELEGATION_HEADER)]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_CHALLENGE = re.compile(r"[0-9a-f]{32,128}")


def connection_address(scope: Scope) -> str:
    """`ip:port` of the server side of the request's connection."""
    server = scope.get("server") or ("", 0)
    return f"{server[0]}:{server[1]}"


class BodyLimitMiddleware:
    """413 for a body over `limit`: on Content-Length at once, else while it streams in."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], limit: int) -> None:
        self._app = app
        self._limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self._limit:
            response = _error(_too_large(self._limit))
            await response(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self._limit:
                raise RequestTooLargeError(_too_large(self._limit).message)
            return message

        await self._app(scope, limited, send)


def _too_large(limit: int) -> ErrorInfo:
    return ErrorInfo(413, "RequestTooLargeException", f"Request body is larger than {limit} bytes")


def _json(body: str, status: int = 200) -> Response:
    return Response(content=body, status_code=status, media_type="application/json")


def _error(info: ErrorInfo) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if info.status == 401 else None
    return JSONResponse(info.body(), status_code=info.status, headers=headers)


@dataclass(frozen=True)
class TableAccess:
    """What a loadTable answer tells the client about storage: `config` (endpoint,
    region, addressing; keys too when vended) and `storage-credentials`."""

    config: dict[str, str]
    storage_credentials: list[dict[str, object]]

    @classmethod
    def none(cls) -> TableAccess:
        return cls({}, [])

    @classmethod
    def for_request(
        cls,
        settings: CatalogServerSettings,
        access_delegation: str | None,
        table: VendedTable | None = None,
    ) -> TableAccess:
        storage = settings.storage
        if storage is None:
            return cls.none()
        config = storage.client_config()
        if not storage.vends_to(access_delegation):
            return cls(config, [])
        if table is not None and table.minter is not None:
            # Temporary credentials scoped to this table, with their expiry and where
            # clients refresh them (Iceberg's VendedCredentialsProvider reads both).
            temporary = table.minter.credentials_for(table.location).file_io_config()
            refresh = {
                "client.refresh-credentials-endpoint": table.refresh_endpoint,
                "client.refresh-credentials-enabled": "true",
            }
            prefix = table.location.rstrip("/") + "/"
            return cls(
                {**config, **temporary, **refresh}, [{"prefix": prefix, "config": temporary}]
            )
        keys = storage.credential_config()
        if not keys:
            return cls(config, [])  # a role to vend but no table to scope it to
        # Clients check storage-credentials first (Java's S3FileIO, pyiceberg, DuckDB);
        # the same keys in `config` serve clients that only read that.
        prefix = settings.warehouse_uri.rstrip("/") + "/"
        return cls({**config, **keys}, [{"prefix": prefix, "config": keys}])


@dataclass(frozen=True)
class VendedTable:
    """The table a loadTable answer is for, when the catalog mints per-table credentials."""

    location: str
    refresh_endpoint: str  # relative to the catalog URI, as Iceberg's clients resolve it
    minter: StsCredentialMinter | None


def _table_response(loaded: LoadedTable, access: TableAccess | None = None) -> Response:
    access = access or TableAccess.none()
    return _json(table_json(loaded, access.config, access.storage_credentials))


def _commit_response(loaded: LoadedTable) -> Response:
    """pyiceberg's `CommitTableResponse`, the same way."""
    location = json.dumps(loaded.metadata_location)
    return _json(f'{{"metadata":{loaded.metadata_json()},"metadata-location":{location}}}')


def _install_error_handlers(app: FastAPI) -> None:
    async def known_error(_request: Request, exc: Exception) -> JSONResponse:
        info = error_info_for(exc)
        assert info is not None  # registered only for handled types
        return _error(info)

    for exc_type in handled_exception_types():
        app.add_exception_handler(exc_type, known_error)

    async def invalid_request(_request: Request, exc: Exception) -> JSONResponse:
        errors = exc.errors() if isinstance(exc, RequestValidationError) else []
        parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors[:5]]
        return _error(ErrorInfo(400, "BadRequestException", "Invalid request: " + "; ".join(parts)))

    async def http_error(_request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc.__cause__, RequestTooLargeError):  # FastAPI wraps body read errors
            return _error(_too_large(MAX_BODY_BYTES))
        status = exc.status_code if isinstance(exc, StarletteHTTPException) else 500
        detail = exc.detail if isinstance(exc, StarletteHTTPException) else "error"
        return _error(
            ErrorInfo(
                status, "NoSuchEndpointException" if status == 404 else "RESTException", str(detail)
            )
        )

    async def unexpected(_request: Request, exc: Exception) -> JSONResponse:
        answer = error_answer(exc)  # logs it
        return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)

    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


def create_app(settings: CatalogServerSettings, service: CatalogService | None = None) -> FastAPI:
    """The ASGI app. Opens the catalog database unless a `service` is given."""
    service = service or CatalogService.open(
        settings.resolved_database_url,
        settings.warehouse_uri,
        settings.catalog_name,
        settings.allowed_locations,
        settings.file_io_properties,
    )
    authority = token_authority(settings)
    # The schema is served below, behind the same token as the API (no /docs, /redoc).
    app = FastAPI(
        title="tableflow Iceberg REST catalog", docs_url=None, redoc_url=None, openapi_url=None
    )
    app.add_middleware(BodyLimitMiddleware, limit=MAX_BODY_BYTES)
    identity_key = ensure_server_key(service.catalog.engine)
    app.state.service = service
    _install_error_handlers(app)

    def require_token(authorization: Annotated[str | None, Header()] = None) -> None:
        if authority is None:
            return
        token = bearer_token(authorization)
        if token is None:
            raise NotAuthorizedError("Missing bearer token (Authorization: Bearer <token>)")
        authority.verify(token)

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(require_token)])
    def openapi_schema() -> Response:
        return JSONResponse(app.openapi())

    @app.post("/v1/oauth/tokens")
    async def get_token(request: Request) -> Response:
        answer = token_answer(authority, await request.body(), request.headers.get("authorization"))
        return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)

    @app.get(PROOF_PATH)
    def prove_identity(request: Request, challenge: str = "") -> Response:
        # No token needed: the answer proves this server holds the project's secret
        # without revealing it (catalog/verification.py, the client side).
        if not _CHALLENGE.fullmatch(challenge):
            raise BadRequestError("challenge must be 32 to 128 hexadecimal digits")
        address = connection_address(request.scope)
        body: dict[str, str | None] = {
            "server": SERVER_KIND,
            "auth": settings.auth,
            "proof": None,
            # Proof of the key in the catalog database, for clients without the secret.
            "identity": server_proof(identity_key, challenge, address),
        }
        if authority is not None:
            body["proof"] = authority.proof(challenge, address)
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)])
    _add_catalog_routes(router, service, settings)
    app.include_router(router)
    return app


def _add_catalog_routes(
    router: APIRouter, service: CatalogService, settings: CatalogServerSettings
) -> None:
    storage = settings.storage
    minter = (
        StsCredentialMinter(storage)
        if storage is not None and storage.vend_credentials and storage.sts_role_arn
        else None
    )

    def table_access(
        access_delegation: str | None, namespace: str, name: str, loaded: LoadedTable
    ) -> TableAccess:
        vended = None
        if loaded.metadata.location:
            vended = VendedTable(
                loaded.metadata.location,
                f"v1/namespaces/{quote(namespace, safe='')}/tables/{quote(name, safe='')}"
                "/credentials",
                minter,
            )
        return TableAccess.for_request(settings, access_delegation, vended)

    @router.get("/config")
    def get_config(warehouse: str | None = None) -> Response:
        return JSONResponse(config_answer(settings).body)

    # -- namespaces -------------------------------------------------------------------

    @router.get("/namespaces")
    def list_namespaces(parent: str | None = None) -> Response:
        namespaces = service.list_namespaces(parse_namespace(parent) if parent else ())
        return _json(ListNamespaceResponse(namespaces=namespaces).model_dump_json())

    @router.post("/namespaces")
    def create_namespace(body: CreateNamespaceBody) -> Response:
        namespace = tuple(body.namespace)
        properties = service.create_namespace(namespace, body.properties)
        return _json(
            NamespaceResponse(namespace=namespace, properties=properties).model_dump_json()
        )

    @router.get("/namespaces/{namespace}")
    def load_namespace(namespace: str) -> Response:
        ns = parse_namespace(namespace)
        properties = service.load_namespace(ns)
        return _json(NamespaceResponse(namespace=ns, properties=properties).model_dump_json())

    @router.head("/namespaces/{namespace}")
    def namespace_exists(namespace: str) -> Response:
        return Response(
            status_code=204 if service.namespace_exists(parse_namespace(namespace)) else 404
        )

    @router.delete("/namespaces/{namespace}", status_code=204)
    def drop_namespace(namespace: str) -> Response:
        service.drop_namespace(parse_namespace(namespace))
        return Response(status_code=204)

    @router.post("/namespaces/{namespace}/properties")
    def update_namespace_properties(
        namespace: str, body: UpdateNamespacePropertiesBody
    ) -> Response:
        summary = service.update_namespace_properties(
            parse_namespace(namespace), body.removals, body.updates
        )
        response = UpdateNamespacePropertiesResponse(
            removed=summary.removed, updated=summary.updated, missing=summary.missing
        )
        return _json(response.model_dump_json())

    # -- tables -----------------------------------------------------------------------

    @router.get("/namespaces/{namespace}/tables")
    def list_tables(namespace: str) -> Response:
        entries = [
            ListTableResponseEntry(namespace=identifier[:-1], name=identifier[-1])
            for identifier in service.list_tables(parse_namespace(namespace))
        ]
        return _json(ListTablesResponse(identifiers=entries).model_dump_json())

    @router.post("/namespaces/{namespace}/tables")
    def create_table(
        namespace: str, body: CreateTableBody, access_delegation: AccessDelegation = None
    ) -> Response:
        loaded = service.create_table(parse_namespace(namespace), body)
        return _table_response(
            loaded, table_access(access_delegation, namespace, body.name, loaded)
        )

    @router.post("/namespaces/{namespace}/register")
    def register_table(
        namespace: str, body: RegisterTableBody, access_delegation: AccessDelegation = None
    ) -> Response:
        loaded = service.register_table(
            parse_namespace(namespace), body.name, body.metadata_location, body.overwrite
        )
        return _table_response(
            loaded, table_access(access_delegation, namespace, body.name, loaded)
        )

    @router.get("/namespaces/{namespace}/tables/{table}")
    def load_table(
        namespace: str,
        table: str,
        snapshots: str | None = None,
        access_delegation: AccessDelegation = None,
    ) -> Response:
        loaded = service.load_table((*parse_namespace(namespace), table))
        return _table_response(loaded, table_access(access_delegation, namespace, table, loaded))

    @router.get("/namespaces/{namespace}/tables/{table}/credentials")
    def load_credentials(
        namespace: str, table: str, access_delegation: AccessDelegation = None
    ) -> Response:
        loaded = service.load_table((*parse_namespace(namespace), table))  # 404 if unknown
        # Asking this endpoint is asking for credentials, with or without the header.
        access = table_access(access_delegation or VENDED_CREDENTIALS, namespace, table, loaded)
        return JSONResponse({"storage-credentials": access.storage_credentials})

    @router.head("/namespaces/{namespace}/tables/{table}")
    def table_exists(namespace: str, table: str) -> Response:
        exists = service.table_exists((*parse_namespace(namespace), table))
        return Response(status_code=204 if exists else 404)

    @router.post("/namespaces/{namespace}/tables/{table}")
    def commit_table(namespace: str, table: str, body: CommitTableBody) -> Response:
        identifier = (*parse_namespace(namespace), table)
        if (
            body.identifier is not None
            and (*body.identifier.namespace.root, body.identifier.name) != identifier
        ):
            raise BadRequestError("The body's identifier does not match the path")
        result = service.commit_table(TableChange(identifier, body.requirements, body.updates))
        return _commit_response(result)

    @router.delete("/namespaces/{namespace}/tables/{table}", status_code=204)
    def drop_table(
        namespace: str,
        table: str,
        purge_requested: Annotated[bool, Query(alias="purgeRequested")] = False,
    ) -> Response:
        service.drop_table((*parse_namespace(namespace), table), purge=purge_requested)
        return Response(status_code=204)

    @router.post("/namespaces/{namespace}/tables/{table}/metrics", status_code=204)
    def report_metrics(namespace: str, table: str) -> Response:
        # Scan and commit reports from Java clients: accepted and not stored.
        return Response(status_code=204)

    @router.post("/tables/rename", status_code=204)
    def rename_table(body: RenameTableBody) -> Response:
        service.rename_table(
            (*body.source.namespace.root, body.source.name),
            (*body.destination.namespace.root, body.destination.name),
        )
        return Response(status_code=204)

    @router.post("/transactions/commit", status_code=204)
    def commit_transaction(body: CommitTransactionBody) -> Response:
        changes = [
            TableChange(
                (*change.identifier.namespace.root, change.identifier.name),
                change.requirements,
                change.updates,
            )
            for change in body.table_changes
            if change.identifier is not None
        ]
        service.commit_tables(changes)
        return Response(status_code=204)

    # -- views: not stored here; listing answers empty so engines that list views work.

    @router.get("/namespaces/{namespace}/views")
    def list_views(namespace: str) -> Response:
        service.list_tables(parse_namespace(namespace))  # 404 for an unknown namespace
        return JSONResponse({"identifiers": []})

    @router.api_route("/namespaces/{namespace}/views/{view}", methods=["GET", "POST", "DELETE"])
    def view(namespace: str, view: str) -> Response:
        raise NoSuchViewError(
            f"View does not exist: {namespace.replace(NAMESPACE_SEPARATOR, '.')}.{view}"
        )

    @router.head("/namespaces/{namespace}/views/{view}")
    def view_exists(namespace: str, view: str) -> Response:
        return Response(status_code=404)

    @router.post("/namespaces/{namespace}/views")
    def create_view(namespace: str) -> Response:
        raise UnsupportedOperationError("This catalog does not store views")
