"""How much history a table keeps: the rule `expire_snapshots` follows when the config does
not say (docs/maintenance.md, "History by refresh interval").

Every commit adds a snapshot of ~1 KB to the table's metadata.json, which every commit
and every reader writes or reads whole. A table refreshed every second that kept Iceberg's
usual 7 days of snapshots would hold ~600,000 of them. So by default a table keeps its
last `HISTORY_REFRESHES` refreshes: snapshots younger than that many refresh intervals
(at most `HISTORY_MAX_AGE`), and never more than that many snapshots, however fast it
committed (a catch-up after an outage commits faster than its interval). A table
refreshed more often than every `HISTORY_REFRESHES / SNAPSHOTS_PER_INTERVAL_SECOND`
seconds keeps fewer: `SNAPSHOTS_PER_INTERVAL_SECOND` per second of its interval (1s:
100, 2s: 200), at least `MIN_HISTORY_REFRESHES`. Its metadata is written most often, and
the whole history with it: in the 10-table soak at 1 s, tables keeping 500 snapshots
committed every 1.2-1.35 s (p50) and kept records 2.0-2.3 s from their readers (p95),
tables keeping 100 every 1.09 s and 1.6-1.9 s (benchmarks/soak.py, docs/production.md).
An explicit `older_than` keeps what it says, by age only (`plan` warns when that is a
long history for the table's interval).

Pure: the snapshots' commit times come from the table's loaded metadata
(`activity.TableActivity.snapshot_times`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tableflow_core.config.models.base import parse_duration_seconds
from tableflow_core.config.models.maintenance import ExpireSnapshotsSettings
from tableflow_core.config.project import Table

# Snapshots a table keeps by default: its last 500 refreshes. At ~1 KB a snapshot the
# metadata.json stays well under 1 MB (benchmarks/soak.py measures it).
HISTORY_REFRESHES = 500
# ... and a fast table fewer: this many per second of its refresh interval, at least
# MIN_HISTORY_REFRESHES (1s: 100 refreshes, 2s: 200, 5s and slower: 500).
SNAPSHOTS_PER_INTERVAL_SECOND = 100
MIN_HISTORY_REFRESHES = 100
HISTORY_MAX_AGE_S = 7 * 86400.0
# The default history is due for expiry once this share of it is expirable (or when
# the block's `every` passed): 500 kept, expired at 600.
EXPIRY_SLACK_SHARE = 5
EXPIRY_SLACK_MIN = 10
# `plan` warns when an explicit `older_than` keeps more snapshots than this.
LONG_HISTORY_SNAPSHOTS = 5_000
# Iceberg's properties for the same rule (what other engines' expiry jobs read).
MAX_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"
MIN_KEEP_PROPERTY = "history.expire.min-snapshots-to-keep"
DELETE_AFTER_COMMIT = "write.metadata.delete-after-commit.enabled"
PREVIOUS_VERSIONS = "write.metadata.previous-versions-max"
MANIFEST_MERGE = "commit.manifest-merge.enabled"
MANIFEST_MIN_COUNT = "commit.manifest.min-count-to-merge"


@dataclass(frozen=True)
class History:
    """The snapshots a table keeps: younger than `max_age_s`, at most `max_snapshots`
    (None: by age only), and always the newest `retain_last`."""

    max_age_s: float
    max_snapshots: int | None
    retain_last: int
    refresh_interval_s: float
    derived: bool  # the age comes from the refresh interval (not written in the config)

    def describe(self) -> str:
        """`keeps 1m40s, at most 100 snapshots, at least 3 (100 refreshes of 1s)`."""
        parts = [f"keeps {human_duration(self.max_age_s)}"]
        if self.max_snapshots is not None:
            parts.append(f"at most {self.max_snapshots} snapshots")
        parts.append(f"at least {self.retain_last}")
        why = (
            f"{self.max_snapshots} refreshes of {human_duration(self.refresh_interval_s)}"
            if self.derived
            else "older_than as configured"
        )
        return f"{', '.join(parts)} ({why})"

    @property
    def slack(self) -> int | None:
        """Expirable snapshots that make expiry due before its interval (None: by the
        interval only)."""
        if self.max_snapshots is None:
            return None
        return max(EXPIRY_SLACK_MIN, self.max_snapshots // EXPIRY_SLACK_SHARE)

    def count_cutoff(self, snapshot_times: Sequence[datetime]) -> datetime | None:
        """Snapshots committed before this moment are beyond the count (`snapshot_times`:
        newest first); None when the count keeps them all."""
        if self.max_snapshots is not None and len(snapshot_times) > self.max_snapshots:
            return snapshot_times[self.max_snapshots - 1]
        return None

    def cutoff(self, now: datetime, snapshot_times: Sequence[datetime]) -> datetime:
        """Snapshots committed before this moment go (`snapshot_times`: newest first)."""
        by_age = now - timedelta(seconds=self.max_age_s)
        by_count = self.count_cutoff(snapshot_times)
        return by_age if by_count is None else max(by_age, by_count)

    def expirable(self, now: datetime, snapshot_times: Sequence[datetime]) -> int:
        """How many of the snapshots expiry would remove now (refs aside)."""
        cut = self.cutoff(now, snapshot_times)
        older = sum(1 for moment in snapshot_times if moment < cut)
        return max(0, min(older, len(snapshot_times) - self.retain_last))

    def properties(self) -> dict[str, str]:
        return {
            MAX_AGE_PROPERTY: str(int(self.max_age_s * 1000)),
            MIN_KEEP_PROPERTY: str(self.retain_last),
        }


def table_history(table: Table) -> History:
    """The history `table` keeps: its `expire_snapshots` settings over the default rule."""
    block = table.maintenance
    settings = block.expire_snapshots if block is not None else None
    settings = settings if settings is not None else ExpireSnapshotsSettings()
    interval = max(table.refresh_interval_s, 1.0)
    if settings.older_than is not None:
        return History(
            max_age_s=parse_duration_seconds(settings.older_than),
            max_snapshots=None,
            retain_last=settings.retain_last,
            refresh_interval_s=interval,
            derived=False,
        )
    refreshes = default_refreshes(interval)
    return History(
        max_age_s=min(refreshes * interval, HISTORY_MAX_AGE_S),
        max_snapshots=refreshes,
        retain_last=settings.retain_last,
        refresh_interval_s=interval,
        derived=True,
    )


def default_refreshes(interval_s: float) -> int:
    """How many refreshes a table refreshed every `interval_s` keeps by default."""
    by_interval = int(SNAPSHOTS_PER_INTERVAL_SECOND * interval_s)
    return min(HISTORY_REFRESHES, max(MIN_HISTORY_REFRESHES, by_interval))


def long_history_warning(table: Table) -> str | None:
    """A warning when the table keeps far more snapshots than the default rule (an explicit
    `older_than` long for its refresh interval, e.g. 7d at 1s); None otherwise."""
    block = table.maintenance
    if block is None or block.expire_snapshots is None:
        return None
    history = table_history(table)
    if history.derived:
        return None
    snapshots = int(history.max_age_s / history.refresh_interval_s)
    if snapshots <= LONG_HISTORY_SNAPSHOTS:
        return None
    return (
        f"expire_snapshots.older_than {human_duration(history.max_age_s)} at a refresh "
        f"interval of {human_duration(history.refresh_interval_s)} keeps ~{snapshots:,} "
        f"snapshots (~{snapshots // 1000:,} MB of metadata.json written by every commit and "
        f"read by every reader); leave older_than out to keep the last "
        f"{default_refreshes(history.refresh_interval_s)} refreshes (docs/maintenance.md)"
    )


def human_duration(seconds: float) -> str:
    """`7d`, `1h`, `8m20s`, `1s`."""
    whole = round(seconds)
    if whole <= 0:
        return f"{seconds:g}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    return "".join(parts[:2])


def metadata_upkeep(properties: Mapping[str, str]) -> str:
    """What a table's properties keep of its metadata: `100 metadata files, manifests
    merged from 10, history 8m20s` (what plan shows for a new table and `maintain
    --dry-run` for an existing one)."""
    parts = []
    if properties.get(DELETE_AFTER_COMMIT, "false").strip().lower() == "true":
        parts.append(f"{properties.get(PREVIOUS_VERSIONS, '100')} metadata files")
    else:
        parts.append("every metadata file (write.metadata.delete-after-commit.enabled off)")
    if properties.get(MANIFEST_MERGE, "false").strip().lower() == "true":
        parts.append(f"manifests merged from {properties.get(MANIFEST_MIN_COUNT, '100')}")
    else:
        parts.append("a manifest per commit (commit.manifest-merge.enabled off)")
    age = properties.get(MAX_AGE_PROPERTY)
    if age is not None and age.isdigit():
        parts.append(f"snapshots {human_duration(int(age) / 1000)}")
    return ", ".join(parts)
