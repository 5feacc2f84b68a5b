"""When each table is due for a refresh (pure; times are monotonic seconds)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

_IDLE_S = 3600.0


@dataclass(frozen=True)
class Schedule:
    """The next time each table is due; immutable, each step returns a new one."""

    next_due: Mapping[str, float]

    @classmethod
    def all_due(cls, tables: Iterable[str], now: float) -> Schedule:
        return cls({name: now for name in tables})

    def due(self, now: float) -> tuple[str, ...]:
        """Tables due at `now`, in a stable order."""
        return tuple(sorted(name for name, at in self.next_due.items() if at <= now))

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

    def seconds_until_next(self, now: float, excluding: Collection[str] = ()) -> float:
        """Until the next table is due, among those not in `excluding` (tables whose
        refresh is running); when every table is excluded, an hour (a refresh that ends
        wakes the scheduler first)."""
        waiting = [at for name, at in self.next_due.items() if name not in excluding]
        if not waiting:
            return _IDLE_S
        return max(0.0, min(waiting) - now)


def slow_tables(
    durations: Mapping[str, float], intervals: Mapping[str, float], factor: float = 2.0
) -> frozenset[str]:
    """Tables whose last refresh took longer than their interval and more than `factor`
    times the median table's: in a cycle with the others they would hold them back."""
    if len(durations) < 2:
        return frozenset()
    ordered = sorted(durations.values())
    median = ordered[len(ordered) // 2]
    return frozenset(
        name
        for name, seconds in durations.items()
        if seconds > intervals.get(name, 0.0) and seconds > factor * median
    )


def cycle_groups(due: Iterable[str], solo: Collection[str]) -> list[tuple[str, ...]]:
    """The cycles that refresh `due`: the tables in `solo` each in a cycle of its own (a
    slow refresh, or maintenance due), the others together (one plan, one shared job)."""
    names = sorted(due)
    together = tuple(n for n in names if n not in solo)
    alone = [(n,) for n in names if n in solo]
    return ([together] if together else []) + alone
