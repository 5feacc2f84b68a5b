"""Issue #32: a token is for one catalog (its audience): two in-process catalog servers
sharing a secret refuse each other's tokens (the pure cases: tests/unit/test_catalog_tokens.py)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

import requests
from pydantic import SecretStr

from tableflow_core.catalog import CatalogServerSettings, serve_in_background
from tableflow_core.catalog.auth import (
    TOKEN_EXCHANGE_GRANT,
)


def exchange(token: str) -> bytes:
    return urlencode({"grant_type": TOKEN_EXCHANGE_GRANT, "subject_token": token}).encode()


def test_two_servers_with_one_secret_refuse_each_others_tokens(tmp_path: Path) -> None:
    secret = SecretStr("shared-secret")
    first = CatalogServerSettings(warehouse=tmp_path / "a", client_secret=secret, access_log=False)
    second = CatalogServerSettings(warehouse=tmp_path / "b", client_secret=secret, access_log=False)
    with serve_in_background(first) as a, serve_in_background(second) as b:
        token = a.bearer_token()
        headers = {"Authorization": f"Bearer {token}"}
        assert requests.get(a.uri + "/v1/namespaces", headers=headers, timeout=10).ok
        refused = requests.get(b.uri + "/v1/namespaces", headers=headers, timeout=10)
        assert refused.status_code == 401
        assert "another catalog" in refused.json()["error"]["message"]
        renewed = requests.post(
            b.uri + "/v1/oauth/tokens", data=exchange(token).decode(), timeout=10,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )  # fmt: skip
        assert renewed.status_code == 401
