"""The run's observer: the scheduler's events move the metrics and the health state; a
thread of its own reads each cycle's tables afterwards (lag, last commit, freshness), so
the scheduler never waits on the metrics.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from tableflow_core.config.project import Table
from tableflow_core.observability.health import Health
from tableflow_core.observability.metrics import RunMetrics
from tableflow_core.observability.readers import CycleFacts, TableReader, TableReading
from tableflow_core.targets.catalog import CatalogHandle
from tableflow_core.tasks.run import CycleReport


class RunObservation:
    """A `tasks.run.RunObserver` feeding `metrics` and `health`."""

    def __init__(
        self,
        tables: Iterable[Table],
        metrics: RunMetrics,
        health: Health,
        reader: TableReader,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.tables = {t.name: t for t in tables}
        self.metrics = metrics
        self.health = health
        self.reader = reader
        self.clock = clock
        self.wall_clock = wall_clock
        self._wake = threading.Condition()
        # Tables to read next, with what their cycle told of them.
        self._pending: dict[str, CycleFacts] = {}
        self._catalog: Any = None
        self._closed = False
        self._busy = False
        self._thread = threading.Thread(
            target=self._read_loop, name="tableflow-metrics-reader", daemon=True
        )
        self._thread.start()

    # --------------------------------------------------------------- RunObserver

    def cycle_started(self, tables: tuple[str, ...]) -> None:
        self.health.cycle_started(tables)

    def cycle_finished(self, report: CycleReport, handle: CatalogHandle | None) -> None:
        causes, commits = self.metrics.observe_cycle(report, report.duration_s, self.wall_clock())
        if not report.refreshed:  # the maintenance lane's report: no table refreshed
            return
        self.health.cycle_finished(causes)
        if handle is None:
            return
        committed = {c.table: c for c in commits}
        offsets = _offsets_told(report)
        with self._wake:
            self._catalog = handle.catalog
            for name in report.tables:
                # A commit waiting to be read is kept until a newer one replaces it.
                told = CycleFacts(committed.get(name), offsets.get(name))
                self._pending[name] = told.newer(self._pending.get(name))
            self._wake.notify()

    def waiting(self, seconds: float) -> None:
        self.health.waiting(seconds)

    # --------------------------------------------------------------- readings

    def settle(self, timeout_s: float = 60.0) -> bool:
        """Wait until every cycle's tables were read (tests, and the last cycle of
        `--once`); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._wake:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._wake.wait(left)
        return True

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        self._thread.join(timeout=5)

    def _read_loop(self) -> None:
        while True:
            with self._wake:
                while not self._pending and not self._closed:
                    self._wake.wait()
                if self._closed:
                    self.reader.close()  # here: its clients are used by this thread only
                    return
                pending, self._pending = self._pending, {}
                catalog = self._catalog
                self._busy = True
            try:
                tables = [self.tables[name] for name in pending if name in self.tables]
                self._apply(self.reader.read(catalog, tables, pending))
            except Exception:  # a reading that fails leaves the last values
                pass
            finally:
                with self._wake:
                    self._busy = False
                    self._wake.notify_all()

    def _apply(self, readings: list[TableReading]) -> None:
        m = self.metrics
        for reading in readings:
            labels = m.labels(reading.table)
            if reading.lag is not None:
                m.lag.labels(*labels).set(reading.lag)
            if reading.last_commit_s is not None:
                m.last_commit.labels(*labels).set(reading.last_commit_s)
            if reading.freshness_s is not None:
                m.freshness.labels(*labels).set(reading.freshness_s)


def _offsets_told(report: CycleReport) -> dict[str, dict[int, int]]:
    """The committed offsets of each table the cycle ran to its end (its result says
    them: what it committed, or what it found committed when there was nothing to do)."""
    results = report.results.tables if report.results is not None else ()
    return {
        r.table: dict(r.offsets_after)
        for r in results
        if r.status in ("success", "no_changes") and r.offsets_after
    }
