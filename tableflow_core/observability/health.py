"""`/healthz` and `/readyz` of `tableflow run` (pure state; the HTTP server reads it).

- healthy: the scheduler ticks. Each of its lanes ticks when a cycle starts, when one
  ends, and before it sleeps until its next due table. It is late when no lane ticked
  past the latest wake-up they announced by `slack_s`, or when a cycle runs longer than
  `stall_after_s` (a hung call): then `/healthz` answers 503 and a supervisor
  (Kubernetes' liveness probe) restarts it.
- ready: the last cycle of every table reached the components the table needs (Kafka,
  the schema registry, the catalog, the object store, Spark). A table that failed on its
  data (bad records, a suspended table, a failed check) or is blocked by its plan reached
  them: it is ready. Before a table's first cycle, it is not ready.

Both answer JSON that names tables and causes only: no error text (it may quote values).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# A cycle running longer than this is taken as hung (a large backfill's first cycle can
# take many minutes: raise it with the run's metrics settings if so).
DEFAULT_STALL_AFTER_S = 3600.0
# The scheduler may wake up this late (a busy machine, a long GC pause) and still be alive.
DEFAULT_SLACK_S = 60.0


@dataclass
class Health:
    tables: tuple[str, ...]
    stall_after_s: float = DEFAULT_STALL_AFTER_S
    slack_s: float = DEFAULT_SLACK_S
    clock: Callable[[], float] = time.monotonic
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _deadline: float = field(default=0.0, init=False)
    # The cycles in flight (their tables: each table is in one at a time) and their start.
    _cycles: dict[frozenset[str], float] = field(default_factory=dict, init=False)
    # Per table: None when its last cycle reached its components, else the cause.
    _not_ready: dict[str, str | None] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        # Until the first cycle starts (the JVM and the first plan), as long as a cycle.
        self._deadline = self.clock() + self.stall_after_s
        self._not_ready = {name: "no cycle yet" for name in self.tables}

    def cycle_started(self, tables: Iterable[str] = ()) -> None:
        with self._lock:
            now = self.clock()
            self._cycles[frozenset(tables)] = now
            self._deadline = max(self._deadline, now + self.slack_s)

    def cycle_finished(self, causes: Mapping[str, str | None]) -> None:
        """`causes`: per table of the cycle (every one), the component it did not reach,
        or None."""
        with self._lock:
            self._cycles.pop(frozenset(causes), None)
            self._deadline = max(self._deadline, self.clock() + self.slack_s)
            self._not_ready.update(causes)

    def waiting(self, seconds: float) -> None:
        with self._lock:
            self._deadline = max(self._deadline, self.clock() + seconds + self.slack_s)

    def healthz(self) -> tuple[bool, dict[str, Any]]:
        with self._lock:
            now = self.clock()
            late_s = max(
                [now - self._deadline]
                + [now - began - self.stall_after_s for began in self._cycles.values()]
            )
            body = {
                "healthy": late_s <= 0,
                "in_cycle": bool(self._cycles),
                "late_s": round(max(0.0, late_s), 1),
            }
        return late_s <= 0, body

    def readyz(self) -> tuple[bool, dict[str, Any]]:
        with self._lock:
            waiting = {name: cause for name, cause in self._not_ready.items() if cause}
        body = {"ready": not waiting, "not_ready": dict(sorted(waiting.items()))}
        return not waiting, body

    def table_ready(self, names: Iterable[str]) -> dict[str, bool]:
        with self._lock:
            return {name: not self._not_ready.get(name) for name in names}
