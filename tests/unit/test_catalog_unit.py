"""Unit tests of the catalog's pure parts: tokens, error mapping, settings, log redaction."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError
from pyiceberg.exceptions import CommitFailedException, NoSuchNamespaceError, NoSuchTableError

from tableflow_core.catalog.auth import OAuthError, TokenAuthority
from tableflow_core.catalog.errors import NotAuthorizedError, error_info_for
from tableflow_core.catalog.runner import RedactSecretsFilter
from tableflow_core.catalog.settings import CatalogServerSettings


def authority(
    secret: str = "s3cret", ttl: int = 60, audience: str = "aud1", max_lifetime: int = 3600
) -> TokenAuthority:
    return TokenAuthority(
        "client", SecretStr(secret), ttl, audience=audience, max_lifetime_seconds=max_lifetime
    )


def test_issued_token_verifies_until_it_expires() -> None:
    token = authority().issue("client", now=1000).access_token
    assert authority().verify(token, now=1059) == "client"
    with pytest.raises(NotAuthorizedError, match="expired"):
        authority().verify(token, now=1060)


def test_token_signed_with_another_secret_or_tampered_is_rejected() -> None:
    token = authority("other").issue("client").access_token
    with pytest.raises(NotAuthorizedError, match="Invalid"):
        authority().verify(token)
    good = authority().issue("client").access_token
    prefix, subject, audience, granted, expiry, signature = good.split(".")
    with pytest.raises(NotAuthorizedError):
        authority().verify(f"{prefix}.{subject}.{audience}.{granted}.{int(expiry) + 9}.{signature}")
    with pytest.raises(NotAuthorizedError):
        authority().verify(f"{prefix}.{subject}.{audience}.{int(granted) + 9}.{expiry}.{signature}")
    with pytest.raises(NotAuthorizedError, match="Malformed"):
        authority().verify("not-a-token")


def test_token_endpoint_checks_client_credentials() -> None:
    issued = authority().token_response(
        b"grant_type=client_credentials&client_id=client&client_secret=s3cret&scope=catalog", None
    )
    assert authority().verify(issued.access_token) == "client"
    with pytest.raises(OAuthError) as bad:
        authority().token_response(
            b"grant_type=client_credentials&client_id=client&client_secret=wrong", None
        )
    assert (bad.value.status, bad.value.code) == (401, "invalid_client")
    assert "wrong" not in bad.value.description


def test_token_exchange_refreshes_a_valid_token() -> None:
    token = authority().issue("client").access_token
    form = f"grant_type=urn:ietf:params:oauth:grant-type:token-exchange&subject_token={token}"
    assert authority().verify(authority().token_response(form.encode(), None).access_token)
    with pytest.raises(OAuthError, match="Invalid"):
        forged = authority("x").issue("client").access_token
        authority().token_response(form.replace(token, forged).encode(), None)


def test_errors_map_to_spec_status_and_type() -> None:
    cases = {
        NoSuchTableError("t"): (404, "NoSuchTableException"),
        NoSuchNamespaceError("n"): (404, "NoSuchNamespaceException"),
        CommitFailedException("c"): (409, "CommitFailedException"),
        NotAuthorizedError("a"): (401, "NotAuthorizedException"),
        ValueError("v"): (400, "BadRequestException"),
    }
    for exc, expected in cases.items():
        info = error_info_for(exc)
        assert info is not None and (info.status, info.type) == expected
        assert info.body()["error"]["code"] == expected[0]
    assert error_info_for(RuntimeError("boom")) is None


def test_client_credentials_auth_requires_a_secret(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="TABLEFLOW_CATALOG_CLIENT_SECRET"):
        CatalogServerSettings(warehouse=tmp_path)
    settings = CatalogServerSettings(warehouse=tmp_path, auth="none")
    assert settings.resolved_database_url == f"sqlite:///{tmp_path.resolve() / 'catalog.db'}"
    shown = repr(CatalogServerSettings(warehouse=tmp_path, client_secret=SecretStr("hunter2")))
    assert "hunter2" not in shown


def test_log_filter_masks_secrets_in_query_strings() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        "",
        0,
        '%s "%s %s"',
        ("1.2.3.4", "GET", "/v1/x?token=abc&a=1"),
        None,
    )
    RedactSecretsFilter().filter(record)
    assert "abc" not in record.getMessage() and "a=1" in record.getMessage()
