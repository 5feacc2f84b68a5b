"""The two answers a client's session opens with: the catalog's config and an access token.

The routes (`catalog/app.py`) send them over HTTP; `InProcessRestCatalog`
(`catalog/in_process.py`) takes them from here without a request, so that a command
whose catalog client answers everything else in this process never needs the server to
run (`catalog/runner.py`'s `serve_in_background(..., on_first_connection=True)`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tableflow_core.catalog.auth import OAuthError, TokenAuthority
from tableflow_core.catalog.clients import HADOOP_FILE_IO
from tableflow_core.catalog.settings import CatalogServerSettings

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
    """An HTTP answer: status, JSON body, extra headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


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
