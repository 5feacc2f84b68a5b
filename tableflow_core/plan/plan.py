"""The Plan: an immutable value describing exactly what `apply` will do.

It records what it was built from (the project config hash and per-table
fingerprints of the world) so a saved plan can be refused when the world changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tableflow_core.plan.actions import Action, Blocker, Ingest, PlanWarning
from tableflow_core.plan.dag import Dag, DagTask
from tableflow_core.text import plural

PLAN_FORMAT_VERSION: Literal[2] = 2
_INDEXES = ("_by_id", "_by_table", "_fingerprints")  # Plan's cached lookups

__all__ = ["Dag", "DagTask", "Plan", "PlanOptions", "Summary", "TableFingerprint"]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TableFingerprint(Frozen):
    """What the plan saw of one table's world; any difference makes a saved plan stale."""

    table: str
    identifier: str
    exists: bool
    snapshot_id: int | None = None
    schema_id: int | None = None
    partition_spec_id: int | None = None
    sort_order_id: int | None = None
    metadata_location: str | None = None
    committed_offsets: dict[int, int] | None = None
    registry_subject: str | None = None
    registry_schema_id: int | None = None
    registry_version: int | None = None
    schema_fingerprint: str | None = None
    # Upsert tables with a registry-encoded key: the key subject's schema.
    key_registry_subject: str | None = None
    key_registry_schema_id: int | None = None
    key_registry_version: int | None = None


class PlanOptions(Frozen):
    allow_destructive: bool = False
    prune: bool = False


class Summary(Frozen):
    to_create: int
    to_update: int
    to_replace: int
    to_drop: int
    undeclared: int
    tables_to_ingest: int
    records_to_ingest: int
    blocked: int


class Plan(Frozen):
    plan_format_version: Literal[2] = PLAN_FORMAT_VERSION
    tableflow_version: str
    created_at: str = Field(description="ISO-8601 UTC time the plan was built")
    project: str
    target: str
    config_hash: str = Field(description="sha256 of the resolved project config and tables")
    selectors: tuple[str, ...] = ()
    options: PlanOptions = PlanOptions()
    tables: tuple[str, ...] = Field(default=(), description="Selected table names")
    actions: tuple[Action, ...] = ()
    blockers: tuple[Blocker, ...] = ()
    warnings: tuple[PlanWarning, ...] = ()
    fingerprints: tuple[TableFingerprint, ...] = ()
    dag: Dag = Dag()
    suspended: dict[str, str] = Field(
        default_factory=dict,
        description="Tables suspended by `tableflow run` (on_error fail): name -> why",
    )

    @property
    def summary(self) -> Summary:
        def count(*kinds: str) -> int:
            return sum(1 for a in self.actions if a.kind in kinds)

        updated_tables = {
            a.table for a in self.actions if a.change == "update" and a.table is not None
        }
        ingests = [a for a in self.actions if isinstance(a, Ingest)]
        return Summary(
            to_create=count("create_table", "create_topic"),
            to_update=len(updated_tables),
            to_replace=count("replace_table"),
            to_drop=count("drop_table"),
            undeclared=count("undeclared_table"),
            tables_to_ingest=len(ingests),
            records_to_ingest=sum(a.records for a in ingests),
            blocked=len(self.blockers),
        )

    @property
    def changes(self) -> tuple[Action, ...]:
        """The actions apply takes: every one but the reports (maintenance due, undeclared
        tables), which only inform."""
        return tuple(a for a in self.actions if a.change != "report")

    @property
    def has_changes(self) -> bool:
        """True when apply would do anything (reports alone are not changes)."""
        return bool(self.changes)

    @property
    def is_applicable(self) -> bool:
        return not self.blockers

    def actions_for(self, table: str) -> tuple[Action, ...]:
        return tuple(self._by_table.get(table, ()))

    def action(self, action_id: str) -> Action:
        return self._by_id[action_id]

    def fingerprint(self, table: str) -> TableFingerprint | None:
        return self._fingerprints.get(table)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Plan:
        copy = super().model_copy(update=update, deep=deep)
        for index in _INDEXES:  # built from the original's fields, maybe not the copy's
            copy.__dict__.pop(index, None)
        return copy

    # Indexes for the lookups above: apply makes one per task, so a scan each was
    # quadratic in the tables (computed once; the plan is immutable).
    @cached_property
    def _by_id(self) -> dict[str, Action]:
        return {action.id: action for action in self.actions}

    @cached_property
    def _by_table(self) -> dict[str, list[Action]]:
        grouped: dict[str, list[Action]] = {}
        for action in self.actions:
            if action.table is not None:
                grouped.setdefault(action.table, []).append(action)
        return grouped

    @cached_property
    def _fingerprints(self) -> dict[str, TableFingerprint]:
        return {f.table: f for f in reversed(self.fingerprints)}  # the first one wins

    def summary_line(self) -> str:
        s = self.summary
        line = (
            f"Plan: {s.to_create} to create, {s.to_update} to update, {s.to_replace} to replace, "
            f"{plural(s.tables_to_ingest, 'table')} to ingest ({plural(s.records_to_ingest, 'record')})"
        )
        if s.to_drop:
            line += f", {s.to_drop} to drop"
        if s.blocked:
            line += f"; {s.blocked} blocked"
        return line
