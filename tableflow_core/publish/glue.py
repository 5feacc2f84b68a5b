"""Publishing to the AWS Glue Data Catalog, the way Iceberg's own Glue catalog does it.

A table is a Glue table with `table_type=ICEBERG` and `metadata_location` in its
parameters: missing tables are created with CreateTable; stale pointers are moved with
UpdateTable, setting `previous_metadata_location` and passing the VersionId read with
the pointer (Glue's optimistic lock: a concurrent update raises
ConcurrentModificationException, which is retried by the caller after re-reading).
Glue databases are one level: the table's namespace parts are joined with `_`.
"""

from __future__ import annotations

from typing import Any

from tableflow_core.config.models.catalogs import GlueCatalog
from tableflow_core.publish.errors import PublishConflictError, PublishError

ICEBERG_PARAMETERS = {"table_type": "ICEBERG"}
PUBLISHED_BY = {"tableflow.published": "true"}

_PRIMITIVES = {
    "boolean": "boolean",
    "int": "int",
    "long": "bigint",
    "float": "float",
    "double": "double",
    "date": "date",
    "time": "string",
    "timestamp": "timestamp",
    "timestamptz": "timestamp",
    "timestamp_ns": "timestamp",
    "timestamptz_ns": "timestamp",
    "string": "string",
    "uuid": "string",
    "binary": "binary",
}


def glue_type(iceberg_type: Any) -> str:
    """The Hive type name Glue (and Athena) show for an Iceberg type."""
    from pyiceberg.types import DecimalType, FixedType, ListType, MapType, StructType

    if isinstance(iceberg_type, StructType):
        fields = ",".join(f"{f.name}:{glue_type(f.field_type)}" for f in iceberg_type.fields)
        return f"struct<{fields}>"
    if isinstance(iceberg_type, ListType):
        return f"array<{glue_type(iceberg_type.element_type)}>"
    if isinstance(iceberg_type, MapType):
        return f"map<{glue_type(iceberg_type.key_type)},{glue_type(iceberg_type.value_type)}>"
    if isinstance(iceberg_type, DecimalType):
        return f"decimal({iceberg_type.precision},{iceberg_type.scale})"
    if isinstance(iceberg_type, FixedType):
        return "binary"
    return _PRIMITIVES.get(str(iceberg_type), "string")


def table_details(metadata_location: str) -> tuple[str, list[dict[str, str]]]:
    """(table location, Glue columns) from the metadata file; when it cannot be read from
    here, the location is derived from the conventional `<table>/metadata/<file>` path."""
    try:
        from pyiceberg.table import StaticTable

        metadata = StaticTable.from_metadata(metadata_location).metadata
    except Exception:
        return metadata_location.rsplit("/metadata/", 1)[0], []
    columns = [
        {"Name": f.name, "Type": glue_type(f.field_type), "Comment": f.doc or ""}
        for f in metadata.schema().fields
    ]
    return metadata.location, columns


def glue_client(config: GlueCatalog) -> Any:
    import boto3

    session = boto3.Session(
        aws_access_key_id=config.access_key_id,
        aws_secret_access_key=(
            config.secret_access_key.get_secret_value() if config.secret_access_key else None
        ),
        aws_session_token=(
            config.session_token.get_secret_value() if config.session_token else None
        ),
        region_name=config.region,
    )
    return session.client("glue", endpoint_url=config.endpoint)


def glue_database(namespace: tuple[str, ...]) -> str:
    return "_".join(namespace)


class GluePublisher:
    def __init__(self, name: str, config: GlueCatalog) -> None:
        self.name = name
        self.client = glue_client(config)
        self.catalog_id = {"CatalogId": config.catalog_id} if config.catalog_id else {}

    def _get(self, namespace: tuple[str, ...], table: str) -> dict[str, Any] | None:
        try:
            response = self.client.get_table(
                DatabaseName=glue_database(namespace), Name=table, **self.catalog_id
            )
        except self.client.exceptions.EntityNotFoundException:
            return None
        found: dict[str, Any] = response["Table"]
        return found

    def current_pointer(self, namespace: tuple[str, ...], table: str) -> str | None:
        found = self._get(namespace, table)
        if found is None:
            return None
        pointer = found.get("Parameters", {}).get("metadata_location")
        if pointer is None:
            raise PublishError(
                f"Glue table {glue_database(namespace)}.{table} in catalog {self.name} exists but "
                "is not an Iceberg table (no metadata_location); not replacing it"
            )
        return str(pointer)

    def _table_input(
        self, table: str, metadata_location: str, previous: str | None
    ) -> dict[str, Any]:
        location, columns = table_details(metadata_location)
        parameters = {**ICEBERG_PARAMETERS, **PUBLISHED_BY, "metadata_location": metadata_location}
        if previous is not None:
            parameters["previous_metadata_location"] = previous
        return {
            "Name": table,
            "TableType": "EXTERNAL_TABLE",
            "Parameters": parameters,
            "StorageDescriptor": {"Location": location, "Columns": columns},
        }

    def register(self, namespace: tuple[str, ...], table: str, metadata_location: str) -> None:
        database = glue_database(namespace)
        try:
            self.client.get_database(Name=database, **self.catalog_id)
        except self.client.exceptions.EntityNotFoundException:
            self.client.create_database(DatabaseInput={"Name": database}, **self.catalog_id)
        try:
            self.client.create_table(
                DatabaseName=database,
                TableInput=self._table_input(table, metadata_location, None),
                **self.catalog_id,
            )
        except self.client.exceptions.AlreadyExistsException as exc:
            raise PublishConflictError(
                f"Glue table {database}.{table} was created by someone else meanwhile"
            ) from exc

    def update(
        self, namespace: tuple[str, ...], table: str, metadata_location: str, previous: str
    ) -> None:
        database = glue_database(namespace)
        found = self._get(namespace, table)
        pointer = (found or {}).get("Parameters", {}).get("metadata_location")
        if found is None or pointer != previous:
            raise PublishConflictError(
                f"Glue table {database}.{table} moved from {previous} to {pointer} meanwhile"
            )
        version = {"VersionId": found["VersionId"]} if found.get("VersionId") else {}
        try:
            self.client.update_table(
                DatabaseName=database,
                TableInput=self._table_input(table, metadata_location, previous),
                SkipArchive=True,
                **version,
                **self.catalog_id,
            )
        except self.client.exceptions.ConcurrentModificationException as exc:
            raise PublishConflictError(
                f"Glue table {database}.{table} was updated concurrently"
            ) from exc

    def close(self) -> None:
        self.client.close()
