"""`tableflow plan`: read the world, build the plan. Never starts a JVM."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

from tableflow_core.collector import paused_collector
from tableflow_core.config.project import Project, Table
from tableflow_core.plan.builder import build_plan
from tableflow_core.plan.plan import Plan, PlanOptions
from tableflow_core.plan.world import Readers, read_world
from tableflow_core.plan.world_state import WorldState
from tableflow_core.targets.catalog import CatalogHandle, use_catalog


@dataclass
class PlanTask:
    project: Project
    tables: tuple[Table, ...]
    selectors: tuple[str, ...] = ()
    options: PlanOptions = field(default_factory=PlanOptions)
    readers: Readers | None = None
    handle: CatalogHandle | None = None  # an open catalog to use; else one is opened
    # Read what each table's commits wrote, for the maintenance the plan shows as due
    # (`tableflow run` leaves it out: it reads what is due after each refresh).
    observe_activity: bool = True
    world: WorldState | None = field(default=None, init=False)  # what the last run() read

    def run(self) -> Plan:
        with paused_collector():
            return self._run()

    def _run(self) -> Plan:
        # Undeclared tables are only judged when the whole project is planned.
        report_undeclared = not self.selectors
        # A plan only reads: an embedded catalog nothing serves is read in this process.
        with use_catalog(self.project, self.handle, serve=False) as handle:
            world = read_world(
                self.project,
                self.tables,
                handle,
                list_undeclared=report_undeclared,
                readers=self.readers,
                observe_activity=self.observe_activity,
            )
        self.world = world
        return build_plan(
            self.project,
            self.tables,
            world,
            options=self.options,
            selectors=self.selectors,
            report_undeclared=report_undeclared,
            tableflow_version=tableflow_version(),
        )


def tableflow_version() -> str:
    try:
        return version("tableflow")
    except PackageNotFoundError:
        return "0+unknown"
