"""Publishing to a SQL catalog (pyiceberg's SqlCatalog, Iceberg's JDBC catalog schema).

The pointer is the `metadata_location` column of `iceberg_tables`; it is moved with a
compare-and-set UPDATE (`WHERE metadata_location = <previous>`), exactly as the
catalog's own commits do, and `previous_metadata_location` is kept.
"""

from __future__ import annotations

from typing import Any

from tableflow_core.config.models.catalogs import SqlCatalog
from tableflow_core.publish.base import PyicebergRegistration
from tableflow_core.publish.errors import PublishConflictError


def sql_properties(config: SqlCatalog) -> dict[str, str]:
    return {"type": "sql", "uri": config.uri, "warehouse": config.warehouse, **config.properties}


class SqlPublisher(PyicebergRegistration):
    def __init__(self, name: str, config: SqlCatalog) -> None:
        from pyiceberg.catalog import load_catalog

        self.name = name
        self.catalog: Any = load_catalog(name, **sql_properties(config))

    def _row_filter(self, namespace: tuple[str, ...], table: str) -> list[Any]:
        from pyiceberg.catalog.sql import IcebergTables

        return [
            IcebergTables.catalog_name == self.catalog.name,
            IcebergTables.table_namespace == ".".join(namespace),
            IcebergTables.table_name == table,
        ]

    def current_pointer(self, namespace: tuple[str, ...], table: str) -> str | None:
        from pyiceberg.catalog.sql import IcebergTables
        from sqlalchemy import select
        from sqlalchemy.orm import Session

        with Session(self.catalog.engine) as session:
            found = session.execute(
                select(IcebergTables.metadata_location).where(*self._row_filter(namespace, table))
            ).scalar_one_or_none()
        return str(found) if found is not None else None

    def update(
        self, namespace: tuple[str, ...], table: str, metadata_location: str, previous: str
    ) -> None:
        from pyiceberg.catalog.sql import IcebergTables
        from sqlalchemy import update
        from sqlalchemy.orm import Session

        with Session(self.catalog.engine) as session:
            result: Any = session.execute(
                update(IcebergTables)
                .where(*self._row_filter(namespace, table))
                .where(IcebergTables.metadata_location == previous)
                .values(metadata_location=metadata_location, previous_metadata_location=previous)
            )
            if result.rowcount != 1:
                session.rollback()
                raise PublishConflictError(
                    f"{'.'.join((*namespace, table))} in SQL catalog {self.name} moved away from "
                    f"{previous} while it was being updated"
                )
            session.commit()

    def close(self) -> None:
        self.catalog.engine.dispose()
