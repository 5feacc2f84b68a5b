"""The embedded catalog server's settings, from a project's `catalog: {type: embedded}`."""

from __future__ import annotations

from typing import Any

from tableflow_core.catalog.settings import CatalogServerSettings
from tableflow_core.config.models import EmbeddedCatalog
from tableflow_core.config.project import Project


def embedded_server_settings(
    project: Project, config: EmbeddedCatalog, **overrides: Any
) -> CatalogServerSettings:
    """Server settings serving the project's warehouse and catalog database.

    `tableflow dev up`, `tableflow catalog serve` and the in-process server of
    plan/apply all use this, so they serve the same tables.
    """
    values: dict[str, Any] = {
        "host": config.host,
        "port": config.port,
        "warehouse": project.resolve_path(config.warehouse),
        "database_url": config.database_url,
        "auth": "none" if config.auth.mode == "none" else "client-credentials",
        "client_id": config.auth.client_id or "tableflow",
        "client_secret": config.auth.client_secret,
        "catalog_name": config.name,
    }
    values.update(overrides)
    return CatalogServerSettings(**values)
