"""What maintenance is due: a pure function of the table's config, its properties and now."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from tableflow_core.config.models import (
    MAINTENANCE_OPERATIONS,
    Maintenance,
    MaintenanceOperation,
    parse_duration_seconds,
)
from tableflow_core.config.project import Table
from tableflow_core.maintenance.last_run import last_runs

# The order operations run in: compaction first (expiry then frees the files it
# replaced), orphan removal last.
RUN_ORDER = (
    "compact",
    "rewrite_deletes",
    "rewrite_manifests",
    "expire_snapshots",
    "remove_orphans",
)
assert set(RUN_ORDER) == set(MAINTENANCE_OPERATIONS)

# Operations that only make sense for some tables.
APPLIES: Mapping[str, Callable[[Table], bool]] = {
    "rewrite_deletes": lambda table: table.mode == "upsert"
}


class HasProperties(Protocol):
    """A table's observed state: plan's ObservedTable and the engine's TableState both fit."""

    @property
    def properties(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class DueOperation:
    """One maintenance operation to run now, and why."""

    table: str
    operation: str
    settings: MaintenanceOperation
    every_s: float
    last_run: datetime | None
    forced: bool = False

    def describe(self, now: datetime | None = None) -> str:
        if self.forced:
            why = "forced"
        elif self.last_run is None:
            why = "never run"
        else:
            why = f"last run {self.last_run.isoformat(timespec='seconds')}"
            if now is not None:
                why += f", {_human((now - self.last_run).total_seconds())} ago"
        return f"{self.operation} on {self.table} (every {_human(self.every_s)}; {why})"


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{int(seconds)}s"


def configured_operations(block: Maintenance) -> dict[str, MaintenanceOperation]:
    return {op: settings for op in RUN_ORDER if (settings := getattr(block, op)) is not None}


def maintenance_due(
    table: Table,
    table_state: HasProperties | Mapping[str, str] | None,
    now: datetime,
    *,
    force: bool = False,
    only: frozenset[str] | None = None,
) -> list[DueOperation]:
    """The table's operations whose interval has passed since their last run, in run order.

    `table_state`: the table's properties (or anything with `.properties`); None means
    the table does not exist yet, so nothing is due. `force`: every configured
    operation, due or not. `only`: restrict to these operation names.
    """
    block = table.maintenance
    if block is None or table_state is None:
        return []
    properties = table_state if isinstance(table_state, Mapping) else table_state.properties
    previous = last_runs(properties)
    due: list[DueOperation] = []
    for op, settings in configured_operations(block).items():
        if only is not None and op not in only:
            continue
        if op in APPLIES and not APPLIES[op](table):
            continue
        every_s = parse_duration_seconds(settings.every or block.every)
        last = previous.get(op)
        is_due = last is None or (now - last).total_seconds() >= every_s
        if force or is_due:
            due.append(DueOperation(table.name, op, settings, every_s, last, force and not is_due))
    return due
