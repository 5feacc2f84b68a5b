"""Which vended credentials are fetched again, and which of the catalog's answers apply."""

from __future__ import annotations

import pytest

from tableflow_core.errors import IngestError
from tableflow_core.pipeline.vended_credentials import (
    EXPIRES_AT_MS,
    REFRESH_MARGIN_SECONDS,
    CredentialRefresh,
    _covering,
    expiring,
)

NOW = 1_800_000_000.0


def test_credentials_expire_within_the_margin_only_when_they_say_so() -> None:
    assert not expiring({}, NOW)  # static keys never expire
    assert not expiring({EXPIRES_AT_MS: str(int((NOW + REFRESH_MARGIN_SECONDS + 1) * 1000))}, NOW)
    assert expiring({EXPIRES_AT_MS: str(int((NOW + REFRESH_MARGIN_SECONDS - 1) * 1000))}, NOW)
    assert expiring({EXPIRES_AT_MS: str(int((NOW - 5) * 1000))}, NOW)


def test_fresh_properties_are_kept_without_asking_the_catalog() -> None:
    refresh = CredentialRefresh("http://127.0.0.1:9/v1/x/credentials", "s3://b/t", ())
    later = {EXPIRES_AT_MS: str(int((NOW + 3600) * 1000)), "s3.endpoint": "e"}
    assert refresh.current(later, NOW) == later  # port 9 is never asked


def test_the_longest_prefix_covering_the_table_wins() -> None:
    answer = [
        {"prefix": "s3://b/", "config": {"s3.access-key-id": "bucket"}},
        {"prefix": "s3://b/ns/t/", "config": {"s3.access-key-id": "table"}},
        {"prefix": "s3://b/ns/t2/", "config": {"s3.access-key-id": "other"}},
    ]
    assert _covering(answer, "s3://b/ns/t") == {"s3.access-key-id": "table"}
    assert _covering(answer, "s3://b/ns/t/") == {"s3.access-key-id": "table"}
    with pytest.raises(IngestError, match="no credentials for s3://c/t"):
        _covering(answer, "s3://c/t")


def test_the_catalog_token_is_not_in_the_representation() -> None:
    refresh = CredentialRefresh(
        "http://c/v1/t/credentials", "s3://b/t", (("Authorization", "Bearer s3cr3t"),)
    )
    assert "s3cr3t" not in repr(refresh) and "s3cr3t" not in str(refresh)
