"""Publishing to an Iceberg REST catalog: another tableflow catalog, Polaris, Unity, Nessie...

Missing tables are registered (`POST .../register`); stale pointers are replaced with
`register_table(overwrite=true)` (Iceberg REST spec, 1.10+). The REST API has no
compare-and-set on a registered pointer, so the last publisher wins; the pointer it
writes is always the source table's current metadata.
"""

from __future__ import annotations

from typing import Any

from tableflow_core.config.models.catalogs import RestCatalog
from tableflow_core.publish.base import PyicebergRegistration
from tableflow_core.publish.errors import PublishError
from tableflow_core.targets.storage import target_storage


def rest_properties(config: RestCatalog) -> dict[str, str]:
    """pyiceberg properties for the catalog (they carry secrets: never print them)."""
    props = {"type": "rest", "uri": config.uri, **config.properties}
    if config.warehouse:
        props["warehouse"] = config.warehouse
    if config.credential is not None:
        props["credential"] = config.credential.get_secret_value()
    if config.token is not None:
        props["token"] = config.token.get_secret_value()
    storage = target_storage(config)
    return {**storage.pyiceberg_properties(), **props} if storage is not None else props


class RestPublisher(PyicebergRegistration):
    def __init__(self, name: str, config: RestCatalog) -> None:
        from pyiceberg.catalog import load_catalog

        self.catalog: Any = load_catalog(name, **rest_properties(config))

    def current_pointer(self, namespace: tuple[str, ...], table: str) -> str | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return str(self.catalog.load_table((*namespace, table)).metadata_location)
        except NoSuchTableError:
            return None

    def update(
        self, namespace: tuple[str, ...], table: str, metadata_location: str, previous: str
    ) -> None:
        from pyiceberg.exceptions import TableAlreadyExistsError

        try:
            self.catalog.register_table((*namespace, table), metadata_location, overwrite=True)
        except TableAlreadyExistsError as exc:
            raise PublishError(
                f"the REST catalog refused to move {'.'.join((*namespace, table))} to new metadata: "
                "it does not support register_table with overwrite (Iceberg REST 1.10+)"
            ) from exc

    def close(self) -> None:
        return None
