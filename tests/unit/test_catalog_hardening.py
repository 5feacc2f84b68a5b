"""Regression tests of issue #12 for the catalog server that need no server: auth default,
confined paths, unsafe settings refused (the rest: tests/integration/test_catalog_hardening.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from tableflow_core.catalog import CatalogServerSettings
from tableflow_core.catalog.locations import LocationPolicy, normalize_location
from tableflow_core.catalog.project_settings import (
    embedded_server_settings,
)
from tableflow_core.catalog.settings import CLIENT_SECRET_ENV
from tableflow_core.config.loader import load_project
from tableflow_core.config.models.catalogs import EmbeddedCatalog

# ---------------------------------------------------------------- auth default


def test_auth_defaults_to_client_credentials_when_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert EmbeddedCatalog().auth.mode == "client_credentials"
    (tmp_path / "tableflow_project.yml").write_text(
        "name: p\ntargets:\n  dev:\n    kafka: {bootstrap_servers: 'b:1'}\n"
        "    catalog: {type: embedded, port: 0}\n"
    )
    project = load_project(tmp_path)
    config = project.target.catalog
    assert isinstance(config, EmbeddedCatalog) and config.auth.mode == "client_credentials"
    monkeypatch.delenv(CLIENT_SECRET_ENV, raising=False)
    with pytest.raises(ValueError, match="needs a client secret"):
        embedded_server_settings(project, config)
    monkeypatch.setenv(CLIENT_SECRET_ENV, "from-the-env")
    settings = embedded_server_settings(project, config)
    assert settings.auth == "client-credentials" and settings.client_secret is not None
    assert settings.client_secret.get_secret_value() == "from-the-env"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_auth_none_is_refused_off_loopback(tmp_path: Path, host: str) -> None:
    with pytest.raises(ValidationError, match="auth 'none' is refused"):
        CatalogServerSettings(warehouse=tmp_path, auth="none", host=host)
    # client_credentials may bind anywhere
    CatalogServerSettings(warehouse=tmp_path, host=host, client_secret=SecretStr("s"))


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_auth_none_is_allowed_on_loopback(tmp_path: Path, host: str) -> None:
    assert CatalogServerSettings(warehouse=tmp_path, auth="none", host=host).auth == "none"


# ---------------------------------------------------------------- locations


def test_normalize_location() -> None:
    assert normalize_location("/a/b/./c") == "file:///a/b/c"
    assert normalize_location("file:/a/b") == "file:///a/b"
    assert normalize_location("file:///a/b/") == "file:///a/b"
    assert normalize_location("file://localhost/a") == "file:///a"
    for bad in ["a/b", "file:///a/../etc", "/a/%2e%2e/etc", "file://evil/a", "/a\x00b", ""]:
        assert normalize_location(bad) is None, bad
    policy = LocationPolicy.for_warehouse("file:///wh", ["s3://bucket/lake"])
    assert policy.allows("/wh/ns/t") and policy.allows("file:///wh")
    assert policy.allows("s3://bucket/lake/t")
    assert not policy.allows("/wh2/t") and not policy.allows("/whx")
    assert not policy.allows("s3://bucket/lake2/t") and not policy.allows("s3://other/lake")


# ---------------------------------------------------------------- metadata updates


# ---------------------------------------------------------------- names


# ---------------------------------------------------------------- helpers


def _schema_json() -> dict[str, Any]:
    return {
        "type": "struct",
        "schema-id": 0,
        "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
    }


def test_table_under_a_legacy_namespace_location_outside_is_refused(tmp_path: Path) -> None:
    from tableflow_core.catalog.locations import LocationNotAllowedError
    from tableflow_core.catalog.models import CreateTableBody
    from tableflow_core.catalog.service import CatalogService

    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    service = CatalogService.open(f"sqlite:///{warehouse / 'c.db'}", warehouse.as_uri())
    try:
        # written before namespace locations were checked: straight into SqlCatalog
        service.catalog.create_namespace(("legacy",), {"location": str(tmp_path / "outside")})
        body = CreateTableBody.model_validate({"name": "t", "schema": _schema_json()})
        with pytest.raises(LocationNotAllowedError):
            service.create_table(("legacy",), body)
        assert not (tmp_path / "outside").exists()
    finally:
        service.close()


@pytest.mark.parametrize(
    ("catalog", "needle"),
    [
        ("{type: embedded, port: 0}", "needs a client secret"),
        ("{type: embedded, port: 0, host: 0.0.0.0, auth: {mode: none}}", "auth 'none' is refused"),
    ],
)
def test_catalog_serve_refuses_unsafe_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalog: str, needle: str
) -> None:
    from click.testing import CliRunner

    from tableflow_core.cli.main import cli

    monkeypatch.delenv(CLIENT_SECRET_ENV, raising=False)
    (tmp_path / "tableflow_project.yml").write_text(
        f"name: p\ntargets:\n  dev:\n    kafka: {{bootstrap_servers: 'b:1'}}\n    catalog: {catalog}\n"
    )
    result = CliRunner().invoke(cli, ["--project-dir", str(tmp_path), "catalog", "serve"])
    assert result.exit_code == 1
    assert needle in " ".join(result.output.split())
