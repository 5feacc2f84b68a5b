"""Data-quality checks (`checks[]`): a discriminated union on `type`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from tableflow_core.config.models.base import IDENTIFIER, ConfigModel
from tableflow_core.config.names import MAX_NAME_LENGTH


class CheckBase(ConfigModel):
    severity: Literal["error", "warn"] = Field(
        "error", description="error: apply `on_failure`; warn: report and continue."
    )
    on_failure: Literal["fail", "skip", "dlq"] | None = Field(
        None,
        description="For row-level checks: what to do with failing rows (default: the table's `on_error`).",
    )


class NotNullCheck(CheckBase):
    type: Literal["not_null"]
    columns: list[str] = Field(min_length=1, description="Columns that must not be null.")


class UniqueCheck(CheckBase):
    type: Literal["unique"]
    columns: list[str] = Field(
        min_length=1, description="Columns whose combination must be unique in the batch."
    )


class AcceptedValuesCheck(CheckBase):
    type: Literal["accepted_values"]
    column: str = Field(description="Column to check.")
    values: list[str | int | float | bool] = Field(min_length=1, description="Allowed values.")


class RangeCheck(CheckBase):
    type: Literal["range"]
    column: str = Field(description="Column to check.")
    min: float | None = Field(None, description="Inclusive lower bound.")
    max: float | None = Field(None, description="Inclusive upper bound.")


class ExpressionCheck(CheckBase):
    type: Literal["expression"]
    name: str = Field(
        pattern=IDENTIFIER, max_length=MAX_NAME_LENGTH, description="Name shown in results."
    )
    expression: str = Field(min_length=1, description="Spark SQL predicate every row must satisfy.")


class RowCountCheck(CheckBase):
    type: Literal["row_count"]
    min: int | None = Field(None, ge=0, description="Minimum rows in a run's batch.")
    max: int | None = Field(None, ge=0, description="Maximum rows in a run's batch.")


Check = Annotated[
    NotNullCheck | UniqueCheck | AcceptedValuesCheck | RangeCheck | ExpressionCheck | RowCountCheck,
    Field(discriminator="type"),
]
