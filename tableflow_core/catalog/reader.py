"""Reading the embedded catalog in this process without serving it (`tableflow plan`).

`plan` only reads the catalog, and when nothing serves the embedded catalog (no `dev
up`, no `catalog serve`), its reads were answered by a server it started on a thread of
its own process: uvicorn's start, FastAPI building its request models on the first
request (~0.26 s of CPU), pyiceberg's config and token requests, and a stop that waits
for the server's loop. On a 1,000-table plan that was ~0.5 s of its ~3 s
(docs/history/performance-issues-26-31.md,
"Session 6: a plan of 1,000 tables in under 3 s"). Here the same `CatalogService` answers
the calls `plan/world.py` makes, with no server: the same database, metadata files and
parsed-metadata cache, and pyiceberg's exceptions for a missing namespace or table.
Anything that writes, or Spark, still talks to a server (`targets/catalog.py`).
"""

from __future__ import annotations

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.typedef import Identifier

from tableflow_core.catalog.in_process import ServiceReads, table_from_service
from tableflow_core.catalog.service import CatalogService
from tableflow_core.catalog.settings import CatalogServerSettings


class ServiceInProcess:
    """The embedded catalog's service open in this process, not served over HTTP."""

    def __init__(self, settings: CatalogServerSettings, service: CatalogService) -> None:
        self.settings = settings
        self.service = service

    def stop(self, timeout: float = 0.0) -> None:
        self.service.close()


class ServiceReader(ServiceReads):
    """The read calls of pyiceberg's catalog that `plan` makes, answered by `service`."""

    def __init__(self, name: str, service: CatalogService, **properties: str) -> None:
        self.name = name
        self.properties = properties
        self._service = service

    def load_table(self, identifier: str | Identifier) -> Table:
        # read-only: nothing commits through this catalog
        return table_from_service(
            self._service, Catalog.identifier_to_tuple(identifier), self, self.properties
        )
