"""The one place that says which configured features are not built yet.

Config parses and validates every key; the planner refuses the ones listed here
with "not supported yet" and the key's file:line, so nothing is silently ignored.
When a feature lands, its issue deletes its entry below (and nothing else).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tableflow_core.config.project import Project, Table
from tableflow_core.delta import delta_refusal
from tableflow_core.plan.actions import Blocker


@dataclass(frozen=True)
class TableGate:
    key: str
    applies: Callable[[Table], bool]
    what: str


TABLE_GATES: tuple[TableGate, ...] = ()

# Catalog types `apply` cannot write to from Spark yet (plan can read them with pyiceberg).
UNSUPPORTED_SPARK_CATALOGS: frozenset[str] = frozenset({"glue", "hive"})


def table_blockers(table: Table) -> list[Blocker]:
    blockers = []
    for gate in TABLE_GATES:
        if gate.applies(table):
            blockers.append(
                Blocker(
                    kind="not_supported",
                    table=table.name,
                    key=gate.key,
                    location=str(table.location_of(gate.key)),
                    message=f"{gate.what} is not supported yet",
                )
            )
    blockers.extend(_delta_blockers(table))
    return blockers


def _delta_blockers(table: Table) -> list[Blocker]:
    """`formats: [.., delta]` on a table whose writes a Delta log cannot mirror."""
    reason = delta_refusal(table) if "delta" in table.formats else None
    if reason is None:
        return []
    return [
        Blocker(
            kind="invalid",
            table=table.name,
            key="formats",
            location=str(table.location_of("formats")),
            message=reason,
        )
    ]


def target_blockers(project: Project) -> list[Blocker]:
    catalog = project.target.catalog
    if catalog.type in UNSUPPORTED_SPARK_CATALOGS:
        return [
            Blocker(
                kind="not_supported",
                table=None,
                key=f"targets.{project.target_name}.catalog.type",
                location=str(project.config_file),
                message=f"catalog type {catalog.type} is not supported yet by apply (Spark)",
            )
        ]
    return []
