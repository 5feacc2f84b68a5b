"""The embedded catalog server's settings, from a project's `catalog: {type: embedded}`."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr, ValidationError

from tableflow_core.catalog.metadata_cache import DEFAULT_MAX_ENTRIES
from tableflow_core.catalog.settings import CLIENT_SECRET_ENV, CatalogServerSettings
from tableflow_core.catalog.storage import ObjectStorage as ServerStorage
from tableflow_core.config.models.catalogs import (
    EmbeddedCatalog,
    ObjectStorage,
    is_object_store_uri,
)
from tableflow_core.config.project import Project


def embedded_client_secret(
    config: EmbeddedCatalog, environ: Mapping[str, str] | None = None
) -> SecretStr | None:
    """The client secret of `client_credentials`: from the project, else the environment."""
    if config.auth.client_secret is not None and config.auth.client_secret.get_secret_value():
        return config.auth.client_secret
    value = (os.environ if environ is None else environ).get(CLIENT_SECRET_ENV)
    return SecretStr(value) if value else None


def embedded_client_credential(
    config: EmbeddedCatalog, environ: Mapping[str, str] | None = None
) -> str | None:
    """`client_id:client_secret` for clients of the embedded catalog; None with auth none
    or when no secret is known (then only an in-process server, with its own secret, works)."""
    if config.auth.mode == "none":
        return None
    secret = embedded_client_secret(config, environ)
    return f"{config.auth.client_id}:{secret.get_secret_value()}" if secret else None


def embedded_server_settings(
    project: Project, config: EmbeddedCatalog, **overrides: Any
) -> CatalogServerSettings:
    """Server settings serving the project's warehouse and catalog database.

    `tableflow dev up`, `tableflow catalog serve` and the in-process server of
    plan/apply all use this, so they serve the same tables. `client_credentials` (the
    default) needs a secret: `catalog.auth.client_secret` or $TABLEFLOW_CATALOG_CLIENT_SECRET.
    Raises ValueError for settings that are not allowed:
    no secret, or auth none on a non-loopback address.
    """
    return _settings(project, config, embedded_client_secret(config), overrides)


def in_process_server_settings(
    project: Project, config: EmbeddedCatalog, **overrides: Any
) -> CatalogServerSettings:
    """Like `embedded_server_settings`, for a server only this process talks to
    (plan/apply): without a configured secret it draws a random one."""
    secret = embedded_client_secret(config)
    if secret is None and config.auth.mode == "client_credentials":
        secret = SecretStr(secrets.token_urlsafe(32))
    return _settings(project, config, secret, overrides)


def _settings(
    project: Project,
    config: EmbeddedCatalog,
    secret: SecretStr | None,
    overrides: dict[str, Any],
) -> CatalogServerSettings:
    values: dict[str, Any] = {
        "host": config.host,
        "port": config.port,
        "warehouse": warehouse_location(project, config),
        "storage": server_storage(config.storage) if config.storage else None,
        "database_url": database_url(project, config),
        "auth": "none" if config.auth.mode == "none" else "client-credentials",
        "client_id": config.auth.client_id,
        "client_secret": secret,
        "catalog_name": config.name,
        # Room for every table's current metadata and then some: a run over 1,000 tables
        # re-parsed each one per cycle when 128 entries were all there was.
        "metadata_cache_entries": max(DEFAULT_MAX_ENTRIES, 2 * len(project.tables)),
    }
    values.update(overrides)
    try:
        return CatalogServerSettings(**values)
    except ValidationError as exc:
        # One readable sentence per problem (pydantic's text would also dump the inputs).
        messages = [str(error["msg"]).removeprefix("Value error, ") for error in exc.errors()]
        raise ValueError("catalog: " + "; ".join(messages)) from None


def warehouse_location(project: Project, config: EmbeddedCatalog) -> Any:
    """An `s3://` warehouse as written; a local one as a path under the project."""
    if is_object_store_uri(config.warehouse):
        return config.warehouse.rstrip("/")
    return project.resolve_path(config.warehouse.removeprefix("file://"))


def database_url(project: Project, config: EmbeddedCatalog) -> str | None:
    """`sqlite:///relative/path` is relative to the project (as every path in it), not to
    the directory tableflow runs in."""
    url = config.database_url
    prefix = "sqlite:///"
    if url is None or not url.startswith(prefix) or url.startswith(prefix + "/"):
        return url
    return prefix + str(project.resolve_path(url.removeprefix(prefix)))


def server_storage(
    storage: ObjectStorage, environ: Mapping[str, str] | None = None
) -> ServerStorage:
    """The server's store: it writes metadata with these keys and vends them to clients
    when `credentials: vended`. A vending block without keys takes the server's own from
    the environment (`TABLEFLOW_S3_ACCESS_KEY_ID` / `TABLEFLOW_S3_SECRET_ACCESS_KEY`, what
    `tableflow dev up` gives the catalog it starts), else the AWS default chain."""
    values: dict[str, Any] = {
        "endpoint": storage.endpoint,
        "region": storage.region,
        "path_style_access": storage.path_style_access,
        "vend_credentials": storage.credential_source == "vended",
        "sts_role_arn": storage.vend_role_arn,
        "sts_endpoint": storage.sts_endpoint,
        "vended_credential_seconds": storage.vended_credential_seconds,
    }
    if storage.access_key_id is None:
        return ServerStorage.from_environment(environ, **values)
    return ServerStorage(
        access_key_id=storage.access_key_id.get_secret_value(),
        secret_access_key=storage.secret_access_key,
        session_token=storage.session_token,
        **values,
    )
