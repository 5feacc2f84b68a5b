"""Request bodies of the REST catalog API.

Response bodies and the table-spec pieces (schema, partition spec, requirements,
updates) are pyiceberg's own models. These request models exist because pyiceberg's
client-side ones are stricter than the spec: Java clients omit `location`, and the
single-table commit body carries no `identifier`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ModelWrapValidatorHandler, field_validator, model_validator
from pyiceberg.catalog.rest import CreateTableRequest
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import TableIdentifier
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import IcebergBaseModel

from tableflow_core.catalog.field_defaults import schema_default_problems


class RequestBody(IcebergBaseModel):
    """A request body; what pyiceberg's validators raise on odd input is a 400.

    pyiceberg's models assume well-typed JSON in places (`properties` must be an object
    before its validator calls `.items()`, a default value's type must be one it can
    convert): a TypeError or AttributeError there is the client's malformed body, not a
    server fault (so is a decimal default `"abc"`: decimal.InvalidOperation). pydantic
    turns the ValueError into a ValidationError (HTTP 400).
    """

    @model_validator(mode="wrap")
    @classmethod
    def _client_input(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        try:
            return handler(data)
        except (TypeError, AttributeError, KeyError, IndexError, ArithmeticError) as exc:
            raise ValueError(f"malformed request body ({exc})") from None


def _check_schema_defaults(schema: Any, what: str) -> None:
    if problems := schema_default_problems(schema):
        raise ValueError(f"invalid {what}: " + "; ".join(problems[:5]))


class CreateNamespaceBody(RequestBody):
    namespace: list[str]
    properties: dict[str, str] = Field(default_factory=dict)


class UpdateNamespacePropertiesBody(RequestBody):
    removals: list[str] = Field(default_factory=list)
    updates: dict[str, str] = Field(default_factory=dict)


class CreateTableBody(CreateTableRequest, RequestBody):
    location: str | None = None
    partition_spec: PartitionSpec | None = Field(alias="partition-spec", default=None)
    write_order: SortOrder | None = Field(alias="write-order", default=None)

    @field_validator("properties", mode="before")
    @classmethod
    def _properties_object(cls, properties: Any) -> Any:
        if not isinstance(properties, dict):
            raise ValueError("properties must be an object of strings")
        return properties

    @model_validator(mode="before")
    @classmethod
    def _defaults_valid(cls, data: Any) -> Any:
        if isinstance(data, dict):
            _check_schema_defaults(data.get("schema"), "schema")
        return data


class CommitTableBody(RequestBody):
    """The spec's CommitTableRequest: `requirements` and `updates` are both required."""

    identifier: TableIdentifier | None = None
    requirements: tuple[TableRequirement, ...]
    updates: tuple[TableUpdate, ...]

    @field_validator("updates", mode="before")
    @classmethod
    def _update_shapes(cls, updates: Any) -> Any:
        for update in updates if isinstance(updates, list | tuple) else ():
            if not isinstance(update, dict):
                continue
            action = update.get("action")
            # pyiceberg's SetStatisticsUpdate reads data["statistics"] before validating it.
            if action == "set-statistics" and not isinstance(update.get("statistics"), dict):
                raise ValueError("set-statistics needs a `statistics` object")
            # pyiceberg's SetPropertiesUpdate calls `.items()` on whatever `updates` is.
            if action == "set-properties" and not isinstance(update.get("updates"), dict):
                raise ValueError("set-properties needs an `updates` object of strings")
            if action == "add-schema":
                _check_schema_defaults(update.get("schema"), "add-schema schema")
        return updates


class CommitTransactionBody(RequestBody):
    table_changes: list[CommitTableBody] = Field(alias="table-changes")

    @field_validator("table_changes")
    @classmethod
    def _every_change_names_its_table(cls, changes: list[CommitTableBody]) -> list[CommitTableBody]:
        if any(change.identifier is None for change in changes):
            raise ValueError("every table change needs an identifier")
        return changes


class RenameTableBody(RequestBody):
    source: TableIdentifier
    destination: TableIdentifier


class RegisterTableBody(RequestBody):
    name: str
    metadata_location: str = Field(alias="metadata-location")
    overwrite: bool = False
