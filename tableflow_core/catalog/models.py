"""Request bodies of the REST catalog API.

Response bodies and the table-spec pieces (schema, partition spec, requirements,
updates) are pyiceberg's own models. These request models exist because pyiceberg's
client-side ones are stricter than the spec: Java clients omit `location`, and the
single-table commit body carries no `identifier`.
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pyiceberg.catalog.rest import CreateTableRequest
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import TableIdentifier
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import IcebergBaseModel


class CreateNamespaceBody(IcebergBaseModel):
    namespace: list[str]
    properties: dict[str, str] = Field(default_factory=dict)


class UpdateNamespacePropertiesBody(IcebergBaseModel):
    removals: list[str] = Field(default_factory=list)
    updates: dict[str, str] = Field(default_factory=dict)


class CreateTableBody(CreateTableRequest):
    location: str | None = None
    partition_spec: PartitionSpec | None = Field(alias="partition-spec", default=None)
    write_order: SortOrder | None = Field(alias="write-order", default=None)


class CommitTableBody(IcebergBaseModel):
    identifier: TableIdentifier | None = None
    requirements: tuple[TableRequirement, ...] = Field(default_factory=tuple)
    updates: tuple[TableUpdate, ...] = Field(default_factory=tuple)


class CommitTransactionBody(IcebergBaseModel):
    table_changes: list[CommitTableBody] = Field(alias="table-changes")

    @field_validator("table_changes")
    @classmethod
    def _every_change_names_its_table(cls, changes: list[CommitTableBody]) -> list[CommitTableBody]:
        if any(change.identifier is None for change in changes):
            raise ValueError("every table change needs an identifier")
        return changes


class RenameTableBody(IcebergBaseModel):
    source: TableIdentifier
    destination: TableIdentifier


class RegisterTableBody(IcebergBaseModel):
    name: str
    metadata_location: str = Field(alias="metadata-location")
    overwrite: bool = False
