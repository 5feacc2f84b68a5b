"""When each table is due for a refresh (pure; times are monotonic seconds)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    """The next time each table is due; immutable, each step returns a new one."""

    next_due: Mapping[str, float]

    @classmethod
    def all_due(cls, tables: Iterable[str], now: float) -> Schedule:
        return cls({name: now for name in tables})

    def due(self, now: float, join_within: float = 0.0) -> tuple[str, ...]:
        """Tables due at `now`, in a stable order; when any is, also those due within
        `join_within` seconds: they join its cycle rather than start one of their own
        right after it (a lane's tables would otherwise stay split into cycles that take
        turns, each table waiting for both)."""
        if not any(at <= now for at in self.next_due.values()):
            return ()
        return tuple(sorted(n for n, at in self.next_due.items() if at <= now + join_within))

    def after_refresh(
        self, refreshed: Iterable[str], intervals: Mapping[str, float], started: float
    ) -> Schedule:
        """Refreshed tables are next due one interval after their refresh *started*, so a
        table with a 60 s interval commits every 60 s, not every 60 s plus the refresh's
        own duration. A refresh that took longer than the interval is followed at once
        (the table is behind; it is never left staler than one refresh)."""
        updated = dict(self.next_due)
        for name in refreshed:
            updated[name] = started + intervals[name]
        return Schedule(updated)

    def seconds_until_next(self, now: float, excluding: AbstractSet[str] = frozenset()) -> float:
        """Until the next table is due, leaving out `excluding` (tables in a cycle or
        their maintenance: the lane is woken when they come back); inf when every table
        is left out."""
        times = [at for name, at in self.next_due.items() if name not in excluding]
        if not times:
            return 0.0 if not self.next_due else math.inf
        return max(0.0, min(times) - now)
