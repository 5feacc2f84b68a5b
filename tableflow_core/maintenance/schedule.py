"""What maintenance is due: a pure function of the table's config, its properties, what
its commits wrote (`activity.py`) and now.

Every operation is due when its interval has passed since its last run. Compaction is
also due when small files or commits pile up: `every_small_files` small files or
`every_commits` commits since the last compaction, whichever comes first (like Flink
CDC's pipeline, which compacts after N commits or an hour). Compaction is never due on
a table with fewer data files than it could merge (`min_input_files`, at least 2): a
one-file table is left alone. Each due operation says which trigger made it due.

An upsert table's delete files are also kept in check (`delete_load.py`), with or
without a `maintenance:` block: merged when they pile up (`rewrite_deletes`), applied to
the data files that carry them (`apply_deletes`: those files rewritten without their
deleted rows) when they hold a share of the rows that makes readers pay and the rewrite
fits its budget per row deleted (one file or many).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from tableflow_core.config.models.base import parse_duration_seconds
from tableflow_core.config.models.maintenance import (
    MAINTENANCE_OPERATIONS,
    CompactSettings,
    ExpireSnapshotsSettings,
    Maintenance,
    MaintenanceOperation,
    RewriteDeletesSettings,
)
from tableflow_core.config.project import Table
from tableflow_core.maintenance.activity import TableActivity
from tableflow_core.maintenance.delete_load import (
    APPLY_DELETES,
    MERGE_MIN_DELETE_FILES,
    DeletesCompaction,
    budget_of,
    delete_file_triggers,
    readers_triggers,
)
from tableflow_core.maintenance.history import History, table_history
from tableflow_core.maintenance.last_run import last_runs

# The order operations run in: rewrites first (expiry then frees the files they
# replaced), orphan removal last. `apply_deletes` is no block's key: due by an upsert
# table's delete files alone (`delete_load.py`).
RUN_ORDER = (
    APPLY_DELETES,
    "compact",
    "rewrite_deletes",
    "rewrite_manifests",
    "expire_snapshots",
    "remove_orphans",
)
assert set(RUN_ORDER) == {*MAINTENANCE_OPERATIONS, APPLY_DELETES}

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
    # The triggers that hold, e.g. "12 commits since the last compaction (due at 10)";
    # empty: the interval alone (described from `last_run`).
    triggers: tuple[str, ...] = ()
    # expire_snapshots: the history the table keeps, and the moment before which its
    # snapshots go by count (None: the count keeps them all, or is not known).
    history: History | None = None
    count_cutoff: datetime | None = None
    # Due (also) by the table's delete files (`delete_load.py`): a compaction rewrites
    # every data file with a delete file; a rewrite_deletes merges them.
    for_deletes: bool = False

    @property
    def arguments(self) -> Any:
        """What the operation runs with (`operations.OPERATIONS`): expiry's cutoff and
        history, a compaction for delete files, the settings of the others."""
        if self.history is not None:
            assert isinstance(self.settings, ExpireSnapshotsSettings)
            return ExpiryRun(
                self.history.max_age_s,
                self.count_cutoff,
                self.history.retain_last,
                self.settings.keep_files_s,
            )
        if self.for_deletes and isinstance(self.settings, CompactSettings):
            return DeletesCompaction(self.settings)
        return self.settings

    def describe(self, now: datetime | None = None) -> str:
        if self.forced:
            why = "forced"
        elif self.triggers:
            why = "; ".join(self.triggers)
        else:
            why = _since_last_run(self.last_run, now)
        return f"{self.operation} on {self.table} ({self.schedule()}; {why})"

    def schedule(self) -> str:
        """`every 1h`, and for compaction its other triggers: `every 1h, 10 commits or 20
        small files`; for expiry the history kept."""
        parts = [f"every {_human(self.every_s)}"]
        if self.history is not None:
            slack = self.history.slack
            when = f"every {_human(self.every_s)}" + (
                f" or {slack} snapshots to expire" if slack is not None else ""
            )
            kept = ""
            if isinstance(self.settings, ExpireSnapshotsSettings) and self.settings.keep_files_s:
                kept = f"; freed files kept {_human(self.settings.keep_files_s)}"
            return f"{when}; {self.history.describe()}{kept}"
        if isinstance(self.settings, CompactSettings):
            if self.settings.every_commits is not None:
                parts.append(f"{self.settings.every_commits} commits")
            if self.settings.every_small_files is not None:
                parts.append(f"{self.settings.every_small_files} small files")
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" or {parts[-1]}"


@dataclass(frozen=True)
class ExpiryRun:
    """What `expire_snapshots` runs with: snapshots older than `max_age_s` when it runs
    (after the operations before it committed theirs) or committed before `count_cutoff`
    (the history's count, from the snapshots when it was due) go; the newest
    `retain_last` stay whatever their age."""

    max_age_s: float
    count_cutoff: datetime | None
    retain_last: int
    # The freed files are deleted this long after the expiry (`expired_files.py`).
    keep_files_s: float

    def cutoff(self, now: datetime) -> datetime:
        by_age = now - timedelta(seconds=self.max_age_s)
        return by_age if self.count_cutoff is None else max(by_age, self.count_cutoff)


def expiry_triggers(
    history: History, activity: TableActivity | None, now: datetime
) -> tuple[str, ...]:
    """The count trigger of the default history: enough snapshots to expire."""
    slack = history.slack
    if slack is None or activity is None:
        return ()
    expirable = history.expirable(now, activity.snapshot_times)
    if expirable < slack:
        return ()
    return (f"{expirable} snapshots to expire of {len(activity.snapshot_times)} (due at {slack})",)


def _since_last_run(last_run: datetime | None, now: datetime | None) -> str:
    if last_run is None:
        return "never run"
    why = f"last run {last_run.isoformat(timespec='seconds')}"
    if now is not None:
        why += f", {_human((now - last_run).total_seconds())} ago"
    return why


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{int(seconds)}s"


def configured_operations(block: Maintenance) -> dict[str, MaintenanceOperation]:
    return {
        op: settings
        for op in RUN_ORDER
        if op in MAINTENANCE_OPERATIONS and (settings := getattr(block, op)) is not None
    }


def compaction_floor(settings: CompactSettings) -> int:
    """The fewest data files worth compacting: `min_input_files`, at least 2."""
    return max(2, settings.min_input_files)


def compaction_triggers(
    settings: CompactSettings, activity: TableActivity, last_run: datetime | None
) -> tuple[str, ...]:
    """The file triggers that hold: small files and commits since the last compaction."""
    commits = activity.since(last_run)
    triggers = []
    small = sum(c.small_files(settings.small_file_bytes) for c in commits)
    if settings.every_small_files is not None and small >= settings.every_small_files:
        triggers.append(
            f"{small} small files since the last compaction (due at {settings.every_small_files})"
        )
    if settings.every_commits is not None and len(commits) >= settings.every_commits:
        triggers.append(
            f"{len(commits)} commits since the last compaction (due at {settings.every_commits})"
        )
    return tuple(triggers)


def maintenance_due(
    table: Table,
    table_state: HasProperties | Mapping[str, str] | None,
    now: datetime,
    *,
    force: bool = False,
    only: frozenset[str] | None = None,
    activity: TableActivity | None = None,
) -> list[DueOperation]:
    """The table's operations that are due, in run order.

    `table_state`: the table's properties (or anything with `.properties`); None means
    the table does not exist yet, so nothing is due. `activity`: what its commits wrote
    (`table_activity`); without it compaction is due by time alone. `force`: every
    configured operation, due or not. `only`: restrict to these operation names.
    """
    block = table.maintenance
    if table_state is None:
        return []
    properties = table_state if isinstance(table_state, Mapping) else table_state.properties
    previous = last_runs(properties)
    for_deletes = _due_for_deletes(table, activity, previous, only)
    if block is None:
        return [for_deletes[op] for op in RUN_ORDER if op in for_deletes]
    configured = configured_operations(block)
    due = [d for op, d in for_deletes.items() if op not in configured]
    for op, settings in configured.items():
        if only is not None and op not in only:
            continue
        if op in APPLIES and not APPLIES[op](table):
            continue
        every_s = parse_duration_seconds(settings.every or block.every)
        last = previous.get(op)
        is_due = last is None or (now - last).total_seconds() >= every_s
        triggers: tuple[str, ...] = ()
        history, count_cutoff = None, None
        if isinstance(settings, ExpireSnapshotsSettings):
            history = table_history(table)
            count_cutoff = history.count_cutoff(activity.snapshot_times if activity else ())
            triggers = expiry_triggers(history, activity, now)
            if triggers and is_due:
                triggers = (_since_last_run(last, now), *triggers)
            is_due = is_due or bool(triggers)
            if history.derived and activity is not None:
                # The default history: nothing to expire, nothing to run (a Spark call
                # per table every `every` for nothing, and on a new table's first cycle).
                is_due = is_due and history.expirable(now, activity.snapshot_times) > 0
        if isinstance(settings, CompactSettings) and activity is not None:
            triggers = compaction_triggers(settings, activity, last)
            if triggers and is_due:
                triggers = (_since_last_run(last, now), *triggers)
            is_due = (is_due or bool(triggers)) and (
                activity.data_files >= compaction_floor(settings)
            )
        if op in for_deletes:
            triggers = (*triggers, *for_deletes[op].triggers)
            is_due = True
        if force or is_due:
            due.append(
                DueOperation(
                    table.name,
                    op,
                    settings,
                    every_s,
                    last,
                    force and not is_due,
                    triggers,
                    history=history,
                    count_cutoff=count_cutoff,
                    for_deletes=op in for_deletes,
                )
            )
    return sorted(due, key=lambda d: RUN_ORDER.index(d.operation))


def _due_for_deletes(
    table: Table,
    activity: TableActivity | None,
    previous: Mapping[str, datetime],
    only: frozenset[str] | None,
) -> dict[str, DueOperation]:
    """An upsert table's operations due by its delete files (`delete_load.py`): the
    deletes applied to the data files that carry them when those hold a share of its
    rows that readers pay for, else the merge of delete files when they pile up; with the
    block's settings of the operation (`compact`'s for `apply_deletes`, which `--only
    compact` selects too), or the defaults."""
    if table.mode != "upsert":
        return {}
    block = table.maintenance
    rewrite = readers_triggers(activity, budget_of(block))
    merge = () if rewrite else delete_file_triggers(activity)
    due: dict[str, DueOperation] = {}
    for op, block_key, triggers, default in (
        (APPLY_DELETES, "compact", rewrite, CompactSettings()),
        (
            "rewrite_deletes",
            "rewrite_deletes",
            merge,
            RewriteDeletesSettings(min_delete_files=MERGE_MIN_DELETE_FILES),
        ),
    ):
        if not triggers or (only is not None and not {op, block_key} & only):
            continue
        configured = getattr(block, block_key) if block is not None else None
        every = (configured.every if configured else None) or (block.every if block else "1h")
        due[op] = DueOperation(
            table.name,
            op,
            configured or default,
            parse_duration_seconds(every),
            previous.get(op),
            triggers=triggers,
            for_deletes=True,
        )
    return due


def not_due_reason(table: Table, activity: TableActivity | None) -> str | None:
    """Why compaction is not due on a table with too few files, for `maintain --dry-run`."""
    block = table.maintenance
    settings = block.compact if block is not None else None
    if settings is None or activity is None:
        return None
    floor = compaction_floor(settings)
    if activity.data_files >= floor:
        return None
    files = "data file" if activity.data_files == 1 else "data files"
    return f"compact not due: {activity.data_files} {files}, fewer than it merges ({floor})"
