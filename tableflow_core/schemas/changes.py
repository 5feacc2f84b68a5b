"""One in-place change of a table's schema: what `schemas.evolution.diff_schemas` finds,
what plan's `evolve_schema` action carries (as is, into the plan JSON) and what apply's
DDL (`engine.ddl.apply_schema_changes`) executes. Kept light (pydantic only): plan
models import it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

ChangeKind = Literal["add_column", "widen_type", "make_optional", "keep_column", "restore_column"]


class SchemaChange(BaseModel):
    """One in-place schema change (from schemas.evolution.diff_schemas)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ChangeKind
    path: str  # dotted column path
    detail: str = ""  # e.g. "int -> long"
