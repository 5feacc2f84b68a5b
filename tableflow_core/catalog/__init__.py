"""tableflow's embedded Iceberg REST catalog: pyiceberg's SqlCatalog behind the REST spec.

Public API:
    CatalogServerSettings, create_app, serve_in_background, serve_in_subprocess,
    RunningCatalogServer,
    CatalogService, pyiceberg_catalog_properties, spark_catalog_properties.

The names are loaded when first used (PEP 562): `tableflow plan` imports small modules of
this package (`catalog.storage`, the object store's settings), and importing the
package must not load the server (FastAPI, SQLAlchemy: ~0.45 s of CPU,
docs/history/performance-issues-26-31.md,
"Session 6: a plan of 1,000 tables in under 3 s").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tableflow_core.catalog.app import create_app
    from tableflow_core.catalog.clients import (
        pyiceberg_catalog_properties,
        spark_catalog_properties,
        token_endpoint,
    )
    from tableflow_core.catalog.runner import (
        RunningCatalogServer,
        serve_forever,
        serve_in_background,
        serve_in_subprocess,
    )
    from tableflow_core.catalog.service import CatalogService
    from tableflow_core.catalog.settings import CLIENT_SECRET_ENV, CatalogServerSettings

# public name -> the module that defines it
_EXPORTS = {
    "CLIENT_SECRET_ENV": "settings",
    "CatalogServerSettings": "settings",
    "CatalogService": "service",
    "RunningCatalogServer": "runner",
    "create_app": "app",
    "pyiceberg_catalog_properties": "clients",
    "serve_forever": "runner",
    "serve_in_background": "runner",
    "serve_in_subprocess": "runner",
    "spark_catalog_properties": "clients",
    "token_endpoint": "clients",
}

__all__ = [
    "CLIENT_SECRET_ENV",
    "CatalogServerSettings",
    "CatalogService",
    "RunningCatalogServer",
    "create_app",
    "pyiceberg_catalog_properties",
    "serve_forever",
    "serve_in_background",
    "serve_in_subprocess",
    "spark_catalog_properties",
    "token_endpoint",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
