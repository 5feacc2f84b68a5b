"""Issue #32: token exchange renews a token only within its grant's maximum lifetime, and
a token is for one catalog (its audience). Pure unit tests (two servers
sharing a secret: tests/integration/test_catalog_tokens_servers.py)."""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import urlencode

import pytest
from pydantic import SecretStr

from tableflow_core.catalog import CatalogServerSettings
from tableflow_core.catalog.auth import (
    CLIENT_CREDENTIALS_GRANT,
    TOKEN_EXCHANGE_GRANT,
    OAuthError,
    TokenAuthority,
)
from tableflow_core.catalog.errors import NotAuthorizedError

HOUR = 3600


def authority(audience: str = "cat-a", secret: str = "s3cret") -> TokenAuthority:
    return TokenAuthority(
        "client", SecretStr(secret), HOUR, audience=audience, max_lifetime_seconds=24 * HOUR
    )


def exchange(token: str) -> bytes:
    return urlencode({"grant_type": TOKEN_EXCHANGE_GRANT, "subject_token": token}).encode()


def basic(client_id: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()


def test_token_exchange_cannot_renew_past_the_grants_maximum_lifetime() -> None:
    start = 1_000_000.0
    token = authority().issue("client", now=start).access_token
    renewed_at = start
    # A client refreshing every 50 minutes, as Iceberg's Java client does, without the secret.
    while True:
        renewed_at += 50 * 60
        try:
            issued = authority().token_response(exchange(token), None, now=renewed_at)
        except OAuthError as refused:
            assert refused.status == 401 and "maximum lifetime" in refused.description
            break
        token = issued.access_token
        assert renewed_at - start < 24 * HOUR
        # never a token that outlives the grant
        assert renewed_at + issued.expires_in <= start + 24 * HOUR
    assert renewed_at - start <= 24 * HOUR + 50 * 60
    with pytest.raises(NotAuthorizedError, match="expired"):
        authority().verify(token, now=start + 24 * HOUR)


def test_token_exchange_with_client_credentials_starts_a_new_grant() -> None:
    # Iceberg's Java client falls back to this when a plain exchange is refused.
    start = 1_000_000.0
    old = authority().issue("client", now=start).access_token
    late = start + 30 * HOUR
    issued = authority().token_response(exchange(old), basic("client", "s3cret"), now=late)
    assert authority().verify(issued.access_token, now=late + HOUR - 1) == "client"
    assert issued.expires_in == HOUR
    with pytest.raises(OAuthError) as wrong:
        authority().token_response(exchange(old), basic("client", "wrong"), now=late)
    assert wrong.value.code == "invalid_client"
    with pytest.raises(OAuthError):
        authority().token_response(exchange(old), "Basic \u00e9\u00e9", now=late)


def test_a_token_of_another_catalog_with_the_same_secret_is_refused() -> None:
    token = authority("cat-a").issue("client").access_token
    assert authority("cat-a").verify(token) == "client"
    with pytest.raises(NotAuthorizedError, match="another catalog"):
        authority("cat-b").verify(token)
    with pytest.raises(OAuthError, match="another catalog"):
        authority("cat-b").token_response(exchange(token), None)


def test_client_credentials_grant_still_works() -> None:
    form = urlencode(
        {"grant_type": CLIENT_CREDENTIALS_GRANT, "client_id": "client", "client_secret": "s3cret"}
    ).encode()
    assert authority().verify(authority().token_response(form, None).access_token) == "client"


def test_audience_is_stable_per_catalog(tmp_path: Path) -> None:
    secret = SecretStr("x")
    one = CatalogServerSettings(warehouse=tmp_path / "a", client_secret=secret)
    again = CatalogServerSettings(warehouse=str(tmp_path / "a"), client_secret=secret, port=9)
    other = CatalogServerSettings(warehouse=tmp_path / "b", client_secret=secret)
    renamed = CatalogServerSettings(
        warehouse=tmp_path / "a", client_secret=secret, catalog_name="c"
    )
    assert one.token_audience == again.token_audience
    assert len({one.token_audience, other.token_audience, renamed.token_audience}) == 3
