"""`tableflow run`: keep tables fresh, each on its `refresh_interval`.

One Spark application serves every cycle, so executors' Python workers and the
JIT stay warm between refreshes. Each cycle plans the due tables and applies the
plan; a table that cannot be planned or applied is reported and retried at its
next interval, and never stops the others.

After a cycle's apply, the maintenance that is due on its tables runs (`MaintainTask`:
under each table's lock, which the apply has released, so never racing the table's
ingest; it publishes and syncs the Delta log after maintenance commits). Maintenance
moves the table's metadata, so the next cycle plans afresh from it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from rich.console import Console

from tableflow_core.config.project import Project, Table
from tableflow_core.plan.plan import Plan, PlanOptions
from tableflow_core.plan.world_state import WorldState
from tableflow_core.runner.actions import SUSPENDED_MARK
from tableflow_core.runner.results import RunResults
from tableflow_core.runner.schedule import Schedule
from tableflow_core.targets.catalog import CatalogHandle, open_catalog
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.maintain import MaintainTask, TableMaintenance
from tableflow_core.tasks.plan import PlanTask

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class CycleReport:
    """What one refresh cycle did."""

    tables: tuple[str, ...]
    blocked: tuple[str, ...] = ()  # tables whose plan has blockers (not applied)
    results: RunResults | None = None
    error: str | None = None  # the cycle failed before any table ran (e.g. broker down)
    maintenance: tuple[TableMaintenance, ...] = ()  # tables with a `maintenance` block
    # Suspended tables (on_error fail met a bad record): name -> why; not run until an
    # apply of the table succeeds.
    suspended: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        failed = self.results is not None and self.results.status != "success"
        maintained = all(m.ok for m in self.maintenance)
        return (
            self.error is None
            and not self.blocked
            and not failed
            and maintained
            and not self.suspended
        )


class RunObserver(Protocol):
    """Watches the scheduler (metrics and health endpoints: `observability/`). Called in
    the scheduler's thread: each call returns at once."""

    def cycle_started(self, tables: tuple[str, ...]) -> None: ...

    def cycle_finished(self, report: CycleReport, handle: CatalogHandle | None) -> None:
        """`handle`: the run's open catalog (None before a cycle reached it)."""

    def waiting(self, seconds: float) -> None:
        """The scheduler sleeps `seconds` until the next due table."""


@dataclass
class RunTask:
    project: Project
    tables: tuple[Table, ...]
    spark_factory: Callable[[], SparkSession]
    once: bool = False
    max_cycles: int | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    console: Console = field(default_factory=lambda: Console(stderr=True))
    on_cycle: Callable[[CycleReport], None] | None = None
    observers: tuple[RunObserver, ...] = ()
    clock: Callable[[], float] = time.monotonic
    # The catalog stays open across cycles (an in-process embedded server is started
    # once, not twice per cycle); opened at the first cycle that reaches it.
    _handle: CatalogHandle | None = field(default=None, init=False, repr=False)
    _open: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, init=False)

    def run(self) -> list[CycleReport]:
        with self._open:
            return self._loop()

    def _catalog(self) -> CatalogHandle:
        if self._handle is None:
            self._handle = self._open.enter_context(open_catalog(self.project))
        return self._handle

    def _loop(self) -> list[CycleReport]:
        intervals = {t.name: t.refresh_interval_s for t in self.tables}
        schedule = Schedule.all_due(intervals, self.clock())
        reports: list[CycleReport] = []
        spark: SparkSession | None = None
        while not self.stop.is_set():
            started = self.clock()
            due = schedule.due(started)
            if due:
                for observer in self.observers:
                    observer.cycle_started(due)
                if spark is None:
                    spark = self.spark_factory()
                report = self._maintain(self._cycle(due, spark), spark)
                reports.append(report)
                for observer in self.observers:
                    observer.cycle_finished(report, self._handle)
                if self.on_cycle is not None:
                    self.on_cycle(report)
                schedule = schedule.after_refresh(due, intervals, started)
                if self.once or (self.max_cycles is not None and len(reports) >= self.max_cycles):
                    break
            wait = schedule.seconds_until_next(self.clock())
            for observer in self.observers:
                observer.waiting(wait)
            self.stop.wait(wait)
        return reports

    def _cycle(self, due: tuple[str, ...], spark: SparkSession) -> CycleReport:
        tables = tuple(t for t in self.tables if t.name in due)
        try:
            plan, world = self._plan(tables)
            suspended = dict(plan.suspended)
            blocked = tuple(sorted({b.table for b in plan.blockers if b.table}))
            if plan.blockers and not blocked:
                # A target-level blocker (e.g. unsupported catalog): nothing can run.
                return CycleReport(due, due, None, "; ".join(b.message for b in plan.blockers))
            if blocked or suspended:
                runnable = tuple(t for t in tables if t.name not in {*blocked, *suspended})
                if runnable:
                    plan, world = self._plan(runnable)
                if not runnable:
                    return CycleReport(due, blocked, suspended=suspended)
            if not plan.has_changes:
                return CycleReport(due, blocked, suspended=suspended)
            results = ApplyTask(
                self.project,
                plan,
                spark=spark,
                console=self.console,
                suspend_on_bad_records=True,
                handle=self._catalog(),
                world=world,
            ).run()
            for table in results.tables:
                if table.status == "error" and table.error and SUSPENDED_MARK in table.error:
                    suspended[table.table] = table.error
            return CycleReport(due, blocked, results, suspended=suspended)
        except Exception as exc:  # keep the scheduler alive; the table retries next interval
            return CycleReport(due, error=self.project.redact(f"{type(exc).__name__}: {exc}"))

    def _maintain(self, report: CycleReport, spark: SparkSession) -> CycleReport:
        """Run what maintenance is due on the cycle's tables (not blocked, and with a
        `maintenance` block, or upsert tables: their delete files are kept in check by
        default, maintenance/delete_load.py); after the apply, so never racing the tables'
        ingest."""
        tables = tuple(
            t
            for t in self.tables
            if t.name in report.tables
            and t.name not in report.blocked
            and (t.maintenance is not None or t.mode == "upsert")
        )
        if not tables or report.error is not None:
            return report
        try:
            done = MaintainTask(
                self.project, tables, spark=spark, console=self.console, handle=self._catalog()
            ).run()
        except Exception as exc:  # e.g. the catalog is down: reported, retried next cycle
            error = self.project.redact(f"maintenance: {type(exc).__name__}: {exc}")
            return replace(report, error=error)
        return replace(report, maintenance=tuple(done))

    def _plan(self, tables: tuple[Table, ...]) -> tuple[Plan, WorldState | None]:
        """The plan of `tables`, and the world it was made from (the apply uses it)."""
        names = tuple(t.name for t in tables)
        task = PlanTask(
            self.project, tables, selectors=names, options=PlanOptions(), handle=self._catalog()
        )
        return task.run(), task.world
