"""HTTP routes of the Confluent Schema Registry REST API (FastAPI)."""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from tableflow_core.registry.errors import RegistryError, bad_request
from tableflow_core.registry.service import SchemaRegistry

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# Confluent's default `max.request.size`-like bound; a schema is kilobytes.
MAX_BODY_BYTES = 16 * 1024 * 1024
_log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class RegistryResponse(JSONResponse):
    media_type = CONTENT_TYPE


def _error(http_status: int, error_code: int, message: str) -> RegistryResponse:
    return RegistryResponse({"error_code": error_code, "message": message}, status_code=http_status)


def _flag(request: Request, name: str) -> bool:
    """Query booleans arrive as true/false or, from the Python client, True/False."""
    return request.query_params.get(name, "false").strip().lower() == "true"


def _int_param(request: Request, name: str, default: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise bad_request(f"{name} must be an integer, not {text[:40]!r}") from None


def _too_large() -> RegistryError:
    return RegistryError(413, 413, f"Request body is larger than {MAX_BODY_BYTES} bytes")


async def _body(request: Request) -> object:
    """The JSON body, read in chunks and refused (413) past MAX_BODY_BYTES."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _too_large()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _too_large()
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        return json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise bad_request("request body nests too deeply") from None


class BasicAuthMiddleware:
    """Require HTTP basic auth on every request; 401 otherwise. Credentials are never logged."""

    def __init__(self, app: Callable[..., Awaitable[None]], username: str, password: str) -> None:
        self._app = app
        self._expected = f"{username}:{password}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._authorized(scope):
            await self._app(scope, receive, send)
            return
        response = _error(401, 40101, "Unauthorized: valid basic auth credentials are required")
        response.headers["WWW-Authenticate"] = 'Basic realm="tableflow-schema-registry"'
        await response(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", []):
            if name == b"authorization" and value[:6].lower() == b"basic ":
                try:
                    supplied = base64.b64decode(value[6:].strip(), validate=True)
                except (binascii.Error, ValueError):
                    return False
                return hmac.compare_digest(supplied, self._expected)
        return False


def create_app(
    registry: SchemaRegistry, username: str | None = None, password: str | None = None
) -> Any:
    """The ASGI app; wrapped in basic auth when `username` is given."""
    app = FastAPI(title="tableflow dev schema registry", default_response_class=RegistryResponse)
    _add_error_handlers(app)
    _add_schema_routes(app, registry)
    _add_subject_routes(app, registry)
    _add_config_routes(app, registry)
    if username:
        return BasicAuthMiddleware(app, username, password or "")
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RegistryError)
    async def registry_error(_: Request, exc: RegistryError) -> Response:
        return _error(exc.http_status, exc.error_code, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> Response:
        return _error(exc.status_code, exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(_: Request, exc: RequestValidationError) -> Response:
        details = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return _error(422, 422, f"Invalid request: {details}")

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        _log.exception("error serving %s %s", request.method, request.url.path)
        return _error(500, 50001, f"Error in the backend data store: {type(exc).__name__}")


def _add_schema_routes(app: FastAPI, registry: SchemaRegistry) -> None:
    # Routes that touch the store are plain `def` (FastAPI's thread pool) or hand the
    # work to run_in_threadpool: a slow request never blocks the event loop.
    @app.get("/")
    def root() -> dict[str, Any]:
        return {}

    @app.get("/schemas/types")
    def schema_types() -> list[str]:
        return ["JSON", "PROTOBUF", "AVRO"]

    @app.get("/schemas")
    def list_schemas(request: Request) -> list[dict[str, Any]]:
        params = request.query_params
        return registry.list_schemas(
            params.get("subjectPrefix", ""),
            _flag(request, "deleted"),
            _flag(request, "latestOnly"),
            _int_param(request, "offset", 0),
            _int_param(request, "limit", -1),
        )

    @app.get("/schemas/ids/{schema_id}")
    def schema_by_id(schema_id: int) -> dict[str, Any]:
        return registry.schema(schema_id)

    @app.get("/schemas/ids/{schema_id}/schema")
    def raw_schema_by_id(schema_id: int) -> Response:
        return Response(registry.schema_text(schema_id), media_type=CONTENT_TYPE)

    @app.get("/schemas/guids/{guid}")
    def schema_by_guid(guid: str) -> dict[str, Any]:
        return registry.schema_by_guid(guid)

    @app.get("/schemas/ids/{schema_id}/versions")
    def schema_versions(schema_id: int, request: Request) -> list[dict[str, Any]]:
        subject = request.query_params.get("subject")
        return registry.schema_versions(schema_id, subject, _flag(request, "deleted"))

    @app.get("/associations/resources/{namespace}/{resource}")
    def associations(namespace: str, resource: str) -> list[dict[str, Any]]:
        """confluent-kafka 2.16's default subject strategy asks this first; none are kept here,
        so clients fall back to TopicNameStrategy (`<topic>-value`)."""
        return []

    @app.get("/schemas/ids/{schema_id}/subjects")
    def schema_subjects(schema_id: int, request: Request) -> list[str]:
        subject = request.query_params.get("subject")
        return registry.schema_subjects(schema_id, subject, _flag(request, "deleted"))


def _add_subject_routes(app: FastAPI, registry: SchemaRegistry) -> None:
    @app.get("/subjects")
    def subjects(request: Request) -> list[str]:
        return registry.subjects(
            request.query_params.get("subjectPrefix"),
            _flag(request, "deleted"),
            _flag(request, "deleted_only"),
        )

    # `:path`: subjects may hold '/' (Confluent's Protobuf serializer registers an import
    # under its file name, e.g. `acme/common.proto`); clients send it as %2F.
    @app.post("/subjects/{subject:path}/versions")
    async def register(subject: str, request: Request) -> dict[str, Any]:
        # Parsing and compatibility checks are CPU work: off the event loop.
        return await run_in_threadpool(registry.register, subject, await _body(request))

    @app.post("/subjects/{subject:path}")
    async def lookup(subject: str, request: Request) -> dict[str, Any]:
        body = await _body(request)
        return await run_in_threadpool(registry.lookup, subject, body, _flag(request, "deleted"))

    @app.get("/subjects/{subject:path}/versions")
    def versions(subject: str, request: Request) -> list[int]:
        return registry.versions(subject, _flag(request, "deleted"), _flag(request, "deleted_only"))

    @app.get("/subjects/{subject:path}/versions/{version}")
    def version(subject: str, version: str, request: Request) -> dict[str, Any]:
        return registry.version(subject, version, _flag(request, "deleted"))

    @app.get("/subjects/{subject:path}/versions/{version}/schema")
    def version_schema(subject: str, version: str, request: Request) -> Response:
        text = registry.version_schema_text(subject, version, _flag(request, "deleted"))
        return Response(text, media_type=CONTENT_TYPE)

    @app.get("/subjects/{subject:path}/versions/{version}/referencedby")
    def referenced_by(subject: str, version: str) -> list[int]:
        return registry.referenced_by(subject, version)

    @app.delete("/subjects/{subject:path}/versions/{version}")
    def delete_version(subject: str, version: str, request: Request) -> int:
        return registry.delete_version(subject, version, _flag(request, "permanent"))

    @app.delete("/subjects/{subject:path}")
    def delete_subject(subject: str, request: Request) -> list[int]:
        return registry.delete_subject(subject, _flag(request, "permanent"))


def _add_config_routes(app: FastAPI, registry: SchemaRegistry) -> None:
    @app.get("/config")
    def get_global_config() -> dict[str, str]:
        return registry.compatibility(None)

    @app.put("/config")
    async def put_global_config(request: Request) -> dict[str, str]:
        body = await _body(request)
        return await run_in_threadpool(registry.set_compatibility, None, body)

    @app.delete("/config")
    def delete_global_config() -> dict[str, str]:
        return registry.delete_compatibility(None)

    @app.get("/config/{subject:path}")
    def get_subject_config(subject: str, request: Request) -> dict[str, str]:
        return registry.compatibility(subject, _flag(request, "defaultToGlobal"))

    @app.put("/config/{subject:path}")
    async def put_subject_config(subject: str, request: Request) -> dict[str, str]:
        body = await _body(request)
        return await run_in_threadpool(registry.set_compatibility, subject, body)

    @app.delete("/config/{subject:path}")
    def delete_subject_config(subject: str) -> dict[str, str]:
        return registry.delete_compatibility(subject)

    @app.post("/compatibility/subjects/{subject:path}/versions/{version}")
    async def check_version(subject: str, version: str, request: Request) -> dict[str, Any]:
        body = await _body(request)
        return await run_in_threadpool(registry.test_compatibility, subject, version, body)

    @app.post("/compatibility/subjects/{subject:path}/versions")
    async def check_all(subject: str, request: Request) -> dict[str, Any]:
        body = await _body(request)
        return await run_in_threadpool(registry.test_compatibility, subject, None, body)
