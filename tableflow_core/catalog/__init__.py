"""tableflow's embedded Iceberg REST catalog: pyiceberg's SqlCatalog behind the REST spec.

Public API:
    CatalogServerSettings, create_app, serve_in_background, serve_in_subprocess,
    RunningCatalogServer,
    CatalogService, pyiceberg_catalog_properties, spark_catalog_properties.
"""

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
