"""Plan blockers for configured features that are not built yet.

Which they are is said once, in `config/capabilities.py`; here they become blockers
with the key's file:line.
"""

from __future__ import annotations

from tableflow_core.config.capabilities import TABLE_GATES, UNSUPPORTED_SPARK_CATALOGS
from tableflow_core.config.project import Project, Table
from tableflow_core.delta import delta_refusal
from tableflow_core.plan.actions import Blocker

__all__ = ["TABLE_GATES", "UNSUPPORTED_SPARK_CATALOGS", "table_blockers", "target_blockers"]


def table_blockers(table: Table) -> list[Blocker]:
    blockers = []
    for gate in TABLE_GATES:
        if gate.applies(table):
            blockers.append(
                Blocker.at(table, gate.key, "not_supported", f"{gate.what} is not supported yet")
            )
    blockers.extend(_delta_blockers(table))
    return blockers


def _delta_blockers(table: Table) -> list[Blocker]:
    """`formats: [.., delta]` on a table whose writes a Delta log cannot mirror."""
    reason = delta_refusal(table) if "delta" in table.formats else None
    if reason is None:
        return []
    return [Blocker.at(table, "formats", "invalid", reason)]


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
