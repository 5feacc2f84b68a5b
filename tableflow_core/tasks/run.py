"""`tableflow run`: keep tables fresh, each on its `refresh_interval`.

One Spark application serves every cycle, so executors' Python workers and the
JIT stay warm between refreshes. A cycle plans due tables and applies the plan; a table
that cannot be planned or applied is reported and retried at its next interval, and
never stops the others.

**Lanes** (`runner/lanes.py`): the tables are split into lanes, each a thread with its
own schedule over its own tables, all on the one Spark application (FAIR scheduling:
each table's jobs in a pool of their own) and the one catalog handle. The tables that
join the shared Spark job refresh together in one lane; each table with a pipeline of
its own (checks, dead letters, ...) has a lane of its own. A table waits only for the
tables of its own lane: a slow checked table no longer holds back every other one.

**Maintenance** has a lane of its own too. After each cycle, its lane reads what
maintenance is due on the cycle's tables (pyiceberg, no Spark: a table with nothing due
has that note in the cycle's report) and hands the tables with something due to the
maintenance lane, one by one. It runs what is due on each (`MaintainTask`: under the
table's lock, so never racing the table's ingest; it publishes and syncs the Delta log
after maintenance commits) and reports it apart (a report with no refreshed tables, its
`maintenance` and the table in `maintenance_due`). A table sits out its lane's cycles
while it is maintained: from its hand-over when the maintenance lane is idle (so it is
maintained between two of its refreshes and its next cycle plans afresh from the
maintained table), else from when the maintenance lane comes to it (after its cycle in
flight): a queue of compactions on a busy machine does not stop the refreshes of the
tables waiting in it. A run until stopped holds a table at most once a minute
(`HELD_MAINTENANCE_SPACING_S`): what falls due meanwhile is done in one go. The other
tables of its lane go on. Locks are waited for, never failed on (`LOCK_WAIT_S`): a
maintenance waits for an ingest of its table from another process, and an apply for a
maintenance.

Each table is in one cycle at a time. The lanes' events (a cycle started, ended; a lane
waits) go through a queue to the thread that called `run()`, which calls the observers
and `on_cycle` one at a time; a table is handed to maintenance, and then released to its
lane, only after its report was delivered.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from rich.console import Console

from tableflow_core.config.project import Project, Table
from tableflow_core.maintenance.beside_ingest import maintained_beside_ingest
from tableflow_core.plan.plan import Plan, PlanOptions
from tableflow_core.plan.world_state import WorldState
from tableflow_core.runner.actions import SUSPENDED_MARK
from tableflow_core.runner.lanes import MAX_OWN_LANES, Lane, assign_lanes
from tableflow_core.runner.results import RunResults
from tableflow_core.runner.schedule import Schedule
from tableflow_core.targets.catalog import CatalogHandle, open_catalog
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.maintain import MaintainTask, TableMaintenance
from tableflow_core.tasks.plan import PlanTask

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MAINTENANCE_LANE = "maintenance"
# How long an apply waits for a table's lock held by its maintenance (or another
# process's apply), and a maintenance for its table's apply: a compaction or a
# refresh's length, not for ever (then the cycle fails and is retried).
LOCK_WAIT_S = 600.0
# The thread that called run() looks at the lanes this often besides their events.
_EVENT_POLL_S = 0.5
# A lane's tables due within this share of its shortest interval join the cycle that
# starts: a table that sat out a cycle (its maintenance under its lock) otherwise came
# back due at another moment than the others, and the lane's cycles took turns for good
# (10-table soak: cycles of 7-8 and 2-3 tables, each table committing every 1.25-1.5 s).
JOIN_SHARE = 0.5
# A run until stopped rests its maintenance lane this many times as long as each table's
# maintenance took, so maintenance takes at most half of the lane's time and leaves the
# cores to the refreshes: in the 10-table soak at 1 s (the template's maintenance, a
# compaction due every ~10 s per table) maintenance ran back to back, ~1 run a second,
# and the tables' cycles slowed with it. Tables waiting meanwhile keep refreshing;
# their compaction merges more files at once when it comes.
MAINTENANCE_REST = 1.0
# A run until stopped maintains a table under its lock (held out of its lane's cycles) at
# most once in this many seconds: each hold costs the table one or two refreshes (it
# comes back after its lane's next cycle started), and a fast upsert table had
# maintenance due after nearly every refresh (its few rows, a delete on most of them:
# apply_deletes due at once; 10-table soak at 1 s: held every ~12 s, freshness p95
# 2.0-2.35 s against 1.6-1.8 s for the tables maintained beside their ingest). What is due
# meanwhile waits and is done in one go; readers pay for the delete files for a minute at
# most. A table refreshed less often than this is maintained after every refresh as
# before.
HELD_MAINTENANCE_SPACING_S = 60.0


@dataclass(frozen=True)
class CycleReport:
    """What one refresh cycle did; or, with no `tables`, what the maintenance lane did
    after a cycle (its `maintenance`, or its `error`)."""

    tables: tuple[str, ...]
    blocked: tuple[str, ...] = ()  # tables whose plan has blockers (not applied)
    results: RunResults | None = None
    error: str | None = None  # the cycle failed before any table ran (e.g. broker down)
    maintenance: tuple[TableMaintenance, ...] = ()  # tables with a `maintenance` block
    # Suspended tables (on_error fail met a bad record): name -> why; not run until an
    # apply of the table succeeds.
    suspended: dict[str, str] = field(default_factory=dict)
    lane: str = ""  # the lane that ran it (`runner/lanes.py`; MAINTENANCE_LANE)
    # Tables of a refresh cycle with maintenance due, handed to the maintenance lane; in
    # the maintenance lane's report, the table it maintained.
    maintenance_due: tuple[str, ...] = ()
    duration_s: float = 0.0  # wall time from the cycle's start to its end

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

    @property
    def refreshed(self) -> bool:
        """A refresh cycle (not the maintenance lane's report)."""
        return bool(self.tables)


class RunObserver(Protocol):
    """Watches the scheduler (metrics and health endpoints: `observability/`). Called
    from the thread that runs `RunTask.run()`, one call at a time, whichever lane the
    event comes from: each call returns at once."""

    def cycle_started(self, tables: tuple[str, ...]) -> None: ...

    def cycle_finished(self, report: CycleReport, handle: CatalogHandle | None) -> None:
        """`handle`: the run's open catalog (None before a cycle reached it)."""

    def waiting(self, seconds: float) -> None:
        """A lane sleeps `seconds` until its next due table."""


@dataclass
class _Lanes:
    """What the lanes share: the tables in a cycle (`busy`), the tables handed to the
    maintenance lane (`queued`) and those it holds out of their lanes' cycles (`held`),
    the refresh cycles started per lane, and each lane's wake-up. The tables maintained
    beside their ingest (`beside`, maintenance/beside_ingest.py) are never held."""

    lanes_of: dict[str, str]
    changed: threading.Condition = field(default_factory=threading.Condition)
    busy: set[str] = field(default_factory=set)
    queued: set[str] = field(default_factory=set)
    held: set[str] = field(default_factory=set)
    started: dict[str, int] = field(default_factory=dict)
    wake: dict[str, threading.Event] = field(default_factory=dict)
    beside: frozenset[str] = frozenset()
    # When each table it held for maintenance was released (monotonic seconds; a table
    # maintained beside its ingest is never held, so never here).
    held_until: dict[str, float] = field(default_factory=dict)
    # The run is ending: nobody releases a busy table any more (`close`).
    closed: bool = False

    def claim(self, lane: str, due: tuple[str, ...], limit: int | None) -> tuple[str, ...]:
        """The due tables neither in a cycle nor held, now busy; () when none, or when
        the lane ran `limit` cycles."""
        with self.changed:
            free = tuple(n for n in due if n not in self.busy and n not in self.held)
            if not free or (limit is not None and self.started.get(lane, 0) >= limit):
                return ()
            self.busy.update(free)
            self.started[lane] = self.started.get(lane, 0) + 1
            return free

    def wait_released(self, tables: tuple[str, ...], timeout: float) -> None:
        """Until the cycle of `tables` was reported and they are free again, `timeout` at
        most: their lane claims its next cycle only then, so the tables of a cycle stay
        together (claiming before the report freed them, the lane took a table back from
        maintenance alone, and the others in a cycle right after it, for good)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while any(n in self.busy for n in tables) and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.changed.wait(left)

    def ran(self, lane: str, limit: int | None) -> bool:
        """The lane ran its `limit` cycles."""
        with self.changed:
            return limit is not None and self.started.get(lane, 0) >= limit

    def unavailable(self) -> frozenset[str]:
        with self.changed:
            return frozenset(self.busy | self.held)

    def hand_over(self, name: str) -> bool:
        """`name` goes to the maintenance lane (False: it is queued there already). When
        the lane is idle the table is held at once, so it is maintained before its next
        refresh; else it keeps refreshing until the lane comes to it (`hold`): a queue of
        compactions on a busy machine does not stop refreshes."""
        with self.changed:
            if name in self.queued:
                return False
            if not self.queued and name not in self.beside:
                self.held.add(name)
            self.queued.add(name)
            return True

    def hold(self, name: str) -> bool:
        """Keep `name` out of new cycles, and wait for its cycle in flight to end (a table
        maintained beside its ingest goes on refreshing). False: the run is ending."""
        if name in self.beside:
            return not self.closed
        with self.changed:
            self.held.add(name)
            while name in self.busy and not self.closed:
                self.changed.wait()
            return not self.closed

    def close(self) -> None:
        """The run ends: a lane waiting in `hold` stops waiting (the report that would
        have released its table is never read)."""
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    def release(self, tables: tuple[str, ...]) -> None:
        """The cycle of `tables` ended (reported)."""
        with self.changed:
            self.busy.difference_update(tables)
            self.changed.notify_all()
        self._wake(tables)

    def maintained(self, name: str, now: float) -> None:
        with self.changed:
            if name in self.held:
                self.held_until[name] = now
            self.held.discard(name)
            self.queued.discard(name)
        self._wake((name,))

    def spaced_out(self, now: float, spacing: float) -> frozenset[str]:
        """The tables maintained under their lock less than `spacing` seconds ago: their
        maintenance waits (`HELD_MAINTENANCE_SPACING_S`)."""
        with self.changed:
            return frozenset(name for name, at in self.held_until.items() if now - at < spacing)

    def _wake(self, tables: tuple[str, ...]) -> None:
        for name in tables:
            self.wake[self.lanes_of[name]].set()


@dataclass
class RunTask:
    project: Project
    tables: tuple[Table, ...]
    spark_factory: Callable[[], SparkSession]
    once: bool = False
    # Cycles each lane runs at most (with one lane, as every table shares one: the run's
    # cycles); then the run ends once every cycle's maintenance was done.
    max_cycles: int | None = None
    # Tables whose ingest survives a maintenance commit are maintained beside it, without
    # their lock, and go on refreshing meanwhile (maintenance/beside_ingest.py); False
    # holds every table out of its cycles while it is maintained.
    beside_ingest: bool = True
    stop: threading.Event = field(default_factory=threading.Event)
    console: Console = field(default_factory=lambda: Console(stderr=True))
    on_cycle: Callable[[CycleReport], None] | None = None
    observers: tuple[RunObserver, ...] = ()
    clock: Callable[[], float] = time.monotonic
    max_own_lanes: int = MAX_OWN_LANES
    # At most one maintenance under a table's lock in this many seconds (None: a run until
    # stopped spaces them by HELD_MAINTENANCE_SPACING_S, a bounded run maintains what is
    # due after every cycle).
    held_spacing_s: float | None = None
    # The catalog stays open across cycles (an in-process embedded server is started
    # once, not twice per cycle); opened at the first cycle that reaches it.
    _handle: CatalogHandle | None = field(default=None, init=False, repr=False)
    _open: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, init=False)
    _catalog_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _spark: SparkSession | None = field(default=None, init=False, repr=False)
    _spark_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def run(self) -> list[CycleReport]:
        """Every cycle's report, in the order they ended, when the run is bounded (`once`,
        `max_cycles`). A run until stopped keeps none: it may run for weeks of cycles, and
        the observers and `on_cycle` get each report as it comes."""
        with self._open:
            return self._run_lanes(assign_lanes(self.tables, self.max_own_lanes))

    def _catalog(self) -> CatalogHandle:
        with self._catalog_lock:  # lanes reaching it at once open it once
            if self._handle is None:
                self._handle = self._open.enter_context(open_catalog(self.project))
            return self._handle

    def _error(self, what: str, exc: Exception) -> str:
        """A report's error: the exception's type and message, secrets redacted."""
        return self.project.redact(f"{what}{type(exc).__name__}: {exc}")

    def _spark_session(self) -> SparkSession:
        with self._spark_lock:
            if self._spark is None:
                self._spark = self.spark_factory()
            return self._spark

    # ------------------------------------------------------------------ the lanes

    def _run_lanes(self, lanes: tuple[Lane, ...]) -> list[CycleReport]:
        state = _Lanes(
            {name: lane.name for lane in lanes for name in lane.tables},
            wake={lane.name: threading.Event() for lane in lanes},
            beside=frozenset(
                t.name for t in self.tables if self.beside_ingest and maintained_beside_ingest(t)
            ),
        )
        events: queue.SimpleQueue[tuple[str, object]] = queue.SimpleQueue()
        to_maintain: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        threads = [
            threading.Thread(
                target=self._lane,
                args=(lane, state, events),
                name=f"tableflow-lane-{lane.name}",
                daemon=True,
            )
            for lane in lanes
        ]
        maintainer = threading.Thread(
            target=self._maintenance_lane,
            args=(to_maintain, state, events),
            name=f"tableflow-lane-{MAINTENANCE_LANE}",
            daemon=True,
        )
        for thread in (*threads, maintainer):
            thread.start()
        reports: list[CycleReport] | None = [] if self.once or self.max_cycles is not None else None
        pending = 0  # cycles handed to the maintenance lane, not reported back yet
        ended = False
        try:
            while True:
                try:
                    kind, value = events.get(timeout=_EVENT_POLL_S)
                except queue.Empty:
                    kind, value = "", None
                if kind == "started":
                    assert isinstance(value, tuple)
                    for observer in self.observers:
                        observer.cycle_started(value)
                elif kind == "waiting":
                    assert isinstance(value, float)
                    for observer in self.observers:
                        observer.waiting(value)
                elif isinstance(value, CycleReport):
                    self._deliver(value, reports)
                    if kind == "maintained":
                        pending -= 1
                        for name in value.maintenance_due:
                            state.maintained(name, self.clock())
                    else:
                        for name in value.maintenance_due:
                            if state.hand_over(name):
                                pending += 1
                                to_maintain.put(name)
                        state.release(value.tables)
                if self.stop.is_set():  # lanes asleep until their next table see it
                    for event in state.wake.values():
                        event.set()
                if not any(t.is_alive() for t in threads) and events.empty() and not pending:
                    ended = True
                    break
        finally:
            if not ended:  # on_cycle or an observer raised: the lanes end too
                self.stop.set()
            state.close()
            to_maintain.put(None)
            for event in state.wake.values():
                event.set()
            for thread in (*threads, maintainer):
                thread.join(timeout=LOCK_WAIT_S)
        return reports or []

    def _deliver(self, report: CycleReport, reports: list[CycleReport] | None) -> None:
        if reports is not None:
            reports.append(report)
        for observer in self.observers:
            observer.cycle_finished(report, self._handle)
        if self.on_cycle is not None:
            self.on_cycle(report)

    def _lane(
        self,
        lane: Lane,
        state: _Lanes,
        events: queue.SimpleQueue[tuple[str, object]],
    ) -> None:
        """One lane: its tables' cycles on their own schedule until `stop`, `--once`
        (each table once) or `max_cycles`."""
        tables = tuple(t for t in self.tables if t.name in lane.tables)
        intervals = {t.name: t.refresh_interval_s for t in tables}
        schedule = Schedule.all_due(intervals, self.clock())
        limit = 1 if self.once else self.max_cycles
        wake = state.wake[lane.name]
        join_within = JOIN_SHARE * min(intervals.values(), default=0.0)
        while not self.stop.is_set():
            started = self.clock()
            due = state.claim(lane.name, schedule.due(started, join_within), limit)
            if due:
                events.put(("started", due))
                try:
                    report = self._cycle(due, self._spark_session())
                    waiting = state.spaced_out(self.clock(), self._held_spacing())
                    report = self._maintenance_due(report, waiting)
                except Exception as exc:  # e.g. Spark did not start: retried next interval
                    error = self._error("", exc)
                    report = CycleReport(due, error=error)
                duration = self.clock() - started
                events.put(("finished", replace(report, lane=lane.name, duration_s=duration)))
                schedule = schedule.after_refresh(due, intervals, started)
                state.wait_released(due, _EVENT_POLL_S)
                continue
            if state.ran(lane.name, limit):
                return
            # Tables due but in a cycle or held for maintenance: woken when released.
            wait = min(
                schedule.seconds_until_next(self.clock(), excluding=state.unavailable()),
                LOCK_WAIT_S,
            )
            events.put(("waiting", float(wait)))
            wake.wait(wait)  # a table released, the next due time, or stop
            wake.clear()

    def _maintenance_lane(
        self,
        to_maintain: queue.SimpleQueue[str | None],
        state: _Lanes,
        events: queue.SimpleQueue[tuple[str, object]],
    ) -> None:
        """Maintains each table handed to it, in the order they came, out of its lane's
        cycles, and reports it (until the run's end: None)."""
        rests = not self.once and self.max_cycles is None
        while True:
            name = to_maintain.get()
            if name is None or not state.hold(name):
                return
            report = self._maintain(name)
            events.put(("maintained", report))
            if rests:
                self.stop.wait(min(report.duration_s * MAINTENANCE_REST, LOCK_WAIT_S))

    def _held_spacing(self) -> float:
        if self.held_spacing_s is not None:
            return self.held_spacing_s
        bounded = self.once or self.max_cycles is not None
        return 0.0 if bounded else HELD_MAINTENANCE_SPACING_S

    def _maintained(self, report: CycleReport, waiting: frozenset[str]) -> tuple[Table, ...]:
        """The cycle's tables that get maintenance after it: not blocked, not `waiting`
        (maintained under their lock too recently), with a `maintenance` block, or upsert
        tables (their delete files are kept in check by default,
        maintenance/delete_load.py); none after a cycle that failed as a whole."""
        if report.error is not None:
            return ()
        return tuple(
            t
            for t in self.tables
            if t.name in report.tables
            and t.name not in report.blocked
            and t.name not in waiting
            and (t.maintenance is not None or t.mode == "upsert")
        )

    def _maintenance_due(self, report: CycleReport, waiting: frozenset[str]) -> CycleReport:
        """The cycle's report with what its tables have due (pyiceberg reads, no Spark):
        a table with nothing due has its note in `maintenance`, one with something due is
        in `maintenance_due`, for the maintenance lane. The `waiting` tables are not
        looked at (their maintenance is spaced out: `HELD_MAINTENANCE_SPACING_S`)."""
        tables = self._maintained(report, waiting)
        if not tables:
            return report
        try:
            found = MaintainTask(
                self.project, tables, dry_run=True, console=self.console, handle=self._catalog()
            ).run()
        except Exception as exc:  # e.g. the catalog is down: reported, retried next cycle
            error = self._error("maintenance: ", exc)
            return replace(report, error=error)
        return replace(
            report,
            maintenance=tuple(m for m in found if not m.due),
            maintenance_due=tuple(m.table for m in found if m.due),
        )

    def _maintain(self, name: str) -> CycleReport:
        """The maintenance lane's report of what it did on table `name` (what is due is
        read again under the table's lock)."""
        began = self.clock()
        report = CycleReport((), lane=MAINTENANCE_LANE, maintenance_due=(name,))
        try:
            done = MaintainTask(
                self.project,
                (self.project.table(name),),
                spark=self._spark_session(),
                console=self.console,
                handle=self._catalog(),
                lock_timeout_s=LOCK_WAIT_S,
                beside_ingest=self.beside_ingest,
            ).run()
        except Exception as exc:  # e.g. the catalog is down: reported, retried next cycle
            error = self._error("maintenance: ", exc)
            return replace(report, error=error, duration_s=self.clock() - began)
        return replace(report, maintenance=tuple(done), duration_s=self.clock() - began)

    # ------------------------------------------------------------------ one cycle

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
                lock_timeout_s=LOCK_WAIT_S,
                merge_results=True,
            ).run()
            for table in results.tables:
                if table.status == "error" and table.error and SUSPENDED_MARK in table.error:
                    suspended[table.table] = table.error
            return CycleReport(due, blocked, results, suspended=suspended)
        except Exception as exc:  # keep the lane alive; the table retries next interval
            return CycleReport(due, error=self._error("", exc))

    def _plan(self, tables: tuple[Table, ...]) -> tuple[Plan, WorldState | None]:
        """The plan of `tables`, and the world it was made from (the apply uses it)."""
        names = tuple(t.name for t in tables)
        task = PlanTask(
            self.project,
            tables,
            selectors=names,
            options=PlanOptions(),
            handle=self._catalog(),
            observe_activity=False,  # what is due is read after the refresh
        )
        return task.run(), task.world
