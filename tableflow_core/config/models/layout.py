"""How a table is laid out: its partition spec (`partition_by`) and write order (`sort_by`)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from tableflow_core.config.models.base import ConfigModel

PARTITION_EXPR = re.compile(
    r"^\s*(?:(?P<fn>identity|year|years|month|months|day|days|hour|hours|bucket|truncate)\s*\(\s*"
    r"(?:(?P<param>\d+)\s*,\s*)?(?P<col>[A-Za-z_][\w.]*)\s*\)|(?P<bare>[A-Za-z_][\w.]*))\s*$"
)


def partition_expression(column: str, transform: str, param: int | None) -> str:
    """`day(created_at)`, `bucket(16, id)`, or the bare column for identity."""
    if transform == "identity":
        return column
    if param is not None:
        return f"{transform}({param}, {column})"
    return f"{transform}({column})"


class PartitionField(ConfigModel):
    """One partition field; also written as a string: `day(created_at)`, `bucket(16, id)`."""

    column: str = Field(description="Source column (dotted path for nested fields).")
    transform: Literal["identity", "bucket", "truncate", "year", "month", "day", "hour"] = Field(
        "identity", description="Iceberg partition transform."
    )
    param: int | None = Field(None, ge=1, description="Bucket count or truncate width.")

    @model_validator(mode="before")
    @classmethod
    def _from_expression(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        match = PARTITION_EXPR.match(value)
        if not match:
            raise ValueError(
                f"cannot parse partition {value!r}: use `col`, `day(col)`, `bucket(16, col)`, `truncate(4, col)`"
            )
        if match.group("bare"):
            return {"column": match.group("bare")}
        fn = match.group("fn").rstrip("s") if match.group("fn") != "hours" else "hour"
        param = match.group("param")
        return {
            "column": match.group("col"),
            "transform": fn,
            "param": int(param) if param else None,
        }

    @model_validator(mode="after")
    def _param_matches_transform(self) -> PartitionField:
        needs_param = self.transform in ("bucket", "truncate")
        if needs_param and self.param is None:
            raise ValueError(
                f"{self.transform} needs a param, e.g. `{self.transform}(16, {self.column})`"
            )
        if not needs_param and self.param is not None:
            raise ValueError(f"{self.transform} takes no param")
        return self

    def expression(self) -> str:
        return partition_expression(self.column, self.transform, self.param)


class SortField(ConfigModel):
    """One sort key; also written as a string: `created_at`, `created_at desc`."""

    column: str = Field(description="Column to sort by.")
    direction: Literal["asc", "desc"] = Field("asc", description="Sort direction.")
    nulls: Literal["first", "last"] | None = Field(
        None, description="Null ordering (default: first for asc)."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_expression(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        parts = value.split()
        if len(parts) == 1:
            return {"column": parts[0]}
        if len(parts) == 2 and parts[1].lower() in ("asc", "desc"):
            return {"column": parts[0], "direction": parts[1].lower()}
        raise ValueError(f"cannot parse sort key {value!r}: use `col` or `col desc`")
