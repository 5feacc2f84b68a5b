"""Answers the catalog's routes give, for the ones an in-process client gets without a
request: the catalog's config, an access token (the two every session opens with), a
created table.

The routes (`catalog/app.py`) send them over HTTP; `InProcessRestCatalog`
(`catalog/in_process.py`) takes them from here, so that a command whose catalog client
answers everything in this process never needs the server to run
(`catalog/runner.py`'s `serve_in_background(..., on_first_connection=True)`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from tableflow_core.catalog.auth import OAuthError, TokenAuthority
from tableflow_core.catalog.clients import HADOOP_FILE_IO
from tableflow_core.catalog.errors import ErrorInfo, error_info_for
from tableflow_core.catalog.models import CreateTableBody
from tableflow_core.catalog.service import CatalogService, LoadedTable
from tableflow_core.catalog.settings import CatalogServerSettings

log = logging.getLogger(__name__)

# The spec's default separator of namespace levels in paths and `parent` (%1F, decoded).
NAMESPACE_SEPARATOR = "\x1f"

SUPPORTED_ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/transactions/commit",
]


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, JSON body (a value, or its text), extra headers."""

    status: int
    body: dict[str, Any] | str
    headers: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        return self.body if isinstance(self.body, str) else json.dumps(self.body)


def token_authority(settings: CatalogServerSettings) -> TokenAuthority | None:
    """The catalog's token issuer and verifier; None when it runs without authentication.
    Tokens are signed with a key derived from the client secret: any authority of the
    same settings verifies the tokens another issued."""
    if settings.auth != "client-credentials" or not settings.client_secret:
        return None
    return TokenAuthority(
        settings.client_id,
        settings.client_secret,
        settings.token_ttl_seconds,
        audience=settings.token_audience,
        max_lifetime_seconds=settings.token_max_lifetime_seconds,
    )


def config_answer(settings: CatalogServerSettings) -> Answer:
    """GET /v1/config. Any warehouse name is accepted: this server has one warehouse. Java
    clients (Spark, Trino's REST client) read and write its file:// paths through Hadoop,
    an s3:// warehouse through S3FileIO with the store's endpoint and region (defaults: a
    client may still point at the store by another address)."""
    if settings.storage is not None:
        defaults = settings.storage.client_config()
    else:
        defaults = {"io-impl": HADOOP_FILE_IO}
    return Answer(200, {"defaults": defaults, "overrides": {}, "endpoints": SUPPORTED_ENDPOINTS})


def token_answer(
    authority: TokenAuthority | None, form_body: bytes, authorization: str | None
) -> Answer:
    """POST /v1/oauth/tokens (form-encoded, `TokenAuthority.token_response`)."""
    if authority is None:
        # auth none: a placeholder, so that clients configured with a credential work
        return Answer(
            200, {"access_token": "anonymous", "token_type": "bearer", "expires_in": 86400}
        )
    try:
        issued = authority.token_response(form_body, authorization)
    except OAuthError as exc:
        return Answer(exc.status, exc.body())
    return Answer(200, dict(issued.response_body()), {"Cache-Control": "no-store"})


def table_json(
    loaded: LoadedTable,
    config: dict[str, str] | None = None,
    storage_credentials: list[dict[str, object]] | None = None,
) -> str:
    """pyiceberg's `TableResponse`, around metadata JSON serialized once per metadata file;
    `config` and `storage_credentials`: what it tells the client about storage."""
    location = loaded.metadata_location  # None for a staged create: left out, as pyiceberg does
    head = f'"metadata-location":{json.dumps(location)},' if location is not None else ""
    tail = (
        f'"config":{json.dumps(config or {})},'
        f'"storage-credentials":{json.dumps(storage_credentials or [])}'
    )
    return f'{{{head}"metadata":{loaded.metadata_json()},{tail}}}'


def error_answer(exc: Exception) -> Answer:
    """The route's error answer to `exc` (an unexpected one: a 500 naming only its type)."""
    info = error_info_for(exc)
    if info is None:
        log.error("Unexpected error", exc_info=exc)
        info = ErrorInfo(500, "ServerErrorException", f"Internal error: {type(exc).__name__}")
    headers = {"WWW-Authenticate": "Bearer"} if info.status == 401 else {}
    return Answer(info.status, dict(info.body()), headers)


def parse_namespace(decoded: str) -> tuple[str, ...]:
    """A namespace from its path segment (percent-decoded)."""
    return tuple(decoded.split(NAMESPACE_SEPARATOR))


def local_create_table_answer(
    service: CatalogService, namespace: tuple[str, ...], body: bytes
) -> Answer:
    """POST /v1/namespaces/{namespace}/tables on a catalog whose answers carry no storage
    configuration (a local warehouse)."""
    try:
        loaded = service.create_table(namespace, CreateTableBody.model_validate_json(body))
    except Exception as exc:
        return error_answer(exc)
    return Answer(200, table_json(loaded))
