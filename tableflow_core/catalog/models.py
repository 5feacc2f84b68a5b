"""Request bodies of the REST catalog API.

Response bodies and the table-spec pieces (schema, partition spec, requirements,
updates) are pyiceberg's own models. These request models exist because pyiceberg's
client-side ones are stricter than the spec: Java clients omit `location`, and the
single-table commit body carries no `identifier`.
"""

from __future__ import annotations

from typing import Any

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
    """The spec's CommitTableRequest: `requirements` and `updates` are both required."""

    identifier: TableIdentifier | None = None
    requirements: tuple[TableRequirement, ...]
    updates: tuple[TableUpdate, ...]

    @field_validator("updates", mode="before")
    @classmethod
    def _statistics_present(cls, updates: Any) -> Any:
        # pyiceberg's SetStatisticsUpdate reads data["statistics"] before validating it.
        for update in updates if isinstance(updates, list | tuple) else ():
            if not isinstance(update, dict):
                continue
            if update.get("action") == "set-statistics" and not isinstance(
                update.get("statistics"), dict
            ):
                raise ValueError("set-statistics needs a `statistics` object")
        return updates


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
