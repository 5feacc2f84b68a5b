"""Partition and sort terms: the one representation shared by config, plan, DDL and engine."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from tableflow_core.config.models.layout import partition_expression

PartitionTransform = Literal["identity", "bucket", "truncate", "year", "month", "day", "hour"]


class PartitionTerm(BaseModel):
    """One partition field: `column` under `transform` (`param` for bucket/truncate)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    column: str
    transform: PartitionTransform = "identity"
    param: int | None = None

    def expression(self) -> str:
        return partition_expression(self.column, self.transform, self.param)


class SortTerm(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    column: str
    descending: bool = False
    nulls_first: bool = True

    def expression(self) -> str:
        direction = "desc" if self.descending else "asc"
        nulls = "nulls first" if self.nulls_first else "nulls last"
        return f"{self.column} {direction} {nulls}"
