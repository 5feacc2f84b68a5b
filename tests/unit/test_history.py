"""Pure tests: the history a table keeps by its refresh interval, expiry's count trigger
and cutoff, the upkeep properties every table gets, and what plan says about them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tableflow_core.config.models.maintenance import Maintenance
from tableflow_core.ingest.spec import DEFAULT_TABLE_PROPERTIES
from tableflow_core.maintenance import maintenance_due
from tableflow_core.maintenance.activity import TableActivity
from tableflow_core.maintenance.history import (
    HISTORY_MAX_AGE_S,
    HISTORY_REFRESHES,
    MAX_AGE_PROPERTY,
    default_refreshes,
    human_duration,
    long_history_warning,
    metadata_upkeep,
    table_history,
)
from tableflow_core.maintenance.schedule import ExpiryRun
from tableflow_core.plan.shape import managed_properties

from .test_maintenance_schedule import table_with

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def expiring(interval_s: float, expire: object = True):  # type: ignore[no-untyped-def]
    block = Maintenance.model_validate({"every": "1h", "expire_snapshots": expire})
    return replace(table_with(block), refresh_interval_s=interval_s)


def test_default_history_is_the_last_500_refreshes_capped_at_7_days() -> None:
    five = table_history(expiring(5))
    assert (five.max_age_s, five.max_snapshots, five.derived) == (2500, 500, True)
    assert (
        five.describe() == "keeps 41m40s, at most 500 snapshots, at least 3 (500 refreshes of 5s)"
    )
    assert table_history(expiring(300)).max_age_s == 500 * 300  # ~42 hours
    assert table_history(expiring(3600)).max_age_s == HISTORY_MAX_AGE_S


def test_a_table_refreshed_faster_than_every_5_seconds_keeps_fewer_refreshes() -> None:
    """Its metadata, the whole history with it, is written at every refresh."""
    second = table_history(expiring(1))
    assert (second.max_age_s, second.max_snapshots) == (100, 100)
    assert (
        second.describe() == "keeps 1m40s, at most 100 snapshots, at least 3 (100 refreshes of 1s)"
    )
    assert [default_refreshes(s) for s in (1, 2, 4.99, 5, 60)] == [100, 200, 499, 500, 500]
    assert table_history(expiring(0.1)).max_snapshots == 100  # intervals count from 1 s


def test_an_explicit_older_than_keeps_by_age_only_and_warns_when_long() -> None:
    week = expiring(1, {"older_than": "7d", "retain_last": 5})
    history = table_history(week)
    assert (history.max_age_s, history.max_snapshots, history.retain_last) == (604800, None, 5)
    warning = long_history_warning(week)
    assert warning is not None and "~604,800 snapshots" in warning
    assert long_history_warning(expiring(300, {"older_than": "7d"})) is None  # 2,016
    assert long_history_warning(expiring(1)) is None


def test_cutoff_keeps_the_newest_500_whatever_the_commit_rate() -> None:
    history = table_history(expiring(5))
    # 2,000 commits in the last 200 s (a catch-up: 10 a second), newest first.
    times = [NOW - timedelta(seconds=i / 10) for i in range(2000)]
    cutoff = history.cutoff(NOW, times)
    assert cutoff == times[HISTORY_REFRESHES - 1]
    assert sum(1 for t in times if t >= cutoff) == HISTORY_REFRESHES
    assert history.expirable(NOW, times) == 2000 - HISTORY_REFRESHES
    # Slow commits: the age decides (one every 50 s, 2,500 s kept: 51 snapshots).
    slow = [NOW - timedelta(seconds=50 * i) for i in range(100)]
    assert history.cutoff(NOW, slow) == NOW - timedelta(seconds=2500)
    assert history.expirable(NOW, slow) == 49


def test_expiry_is_due_by_count_before_its_interval() -> None:
    table = expiring(5)
    ran = NOW - timedelta(minutes=5)  # the hourly interval has not passed
    properties = {"tableflow.maintenance.expire_snapshots.last-run": ran.isoformat()}
    few = TableActivity(
        data_files=3, snapshot_times=tuple(NOW - timedelta(seconds=i) for i in range(550))
    )
    assert maintenance_due(table, properties, NOW, activity=few) == []
    many = TableActivity(
        data_files=3, snapshot_times=tuple(NOW - timedelta(seconds=i) for i in range(620))
    )
    (due,) = maintenance_due(table, properties, NOW, activity=many)
    assert due.operation == "expire_snapshots"
    assert due.triggers == ("120 snapshots to expire of 620 (due at 100)",)
    assert due.arguments == ExpiryRun(2500, many.snapshot_times[HISTORY_REFRESHES - 1], 3, 600)
    # At run time, after compaction committed, by age or by that count, the later.
    assert due.arguments.cutoff(NOW) == many.snapshot_times[HISTORY_REFRESHES - 1]
    assert due.arguments.cutoff(NOW + timedelta(hours=1)) == NOW + timedelta(seconds=1100)
    assert "500 refreshes of 5s" in due.describe(NOW)
    # Never run, but nothing older than the history: not due (no Spark call for nothing).
    young = TableActivity(data_files=3, snapshot_times=(NOW,))
    assert maintenance_due(table, {}, NOW, activity=young) == []
    assert [d.operation for d in maintenance_due(table, {}, NOW)] == ["expire_snapshots"]


def test_every_table_gets_the_upkeep_properties_and_expiring_ones_their_history() -> None:
    props = managed_properties(expiring(1))
    assert props["write.metadata.delete-after-commit.enabled"] == "true"
    assert props["commit.manifest-merge.enabled"] == "true"
    assert props[MAX_AGE_PROPERTY] == "100000"
    assert MAX_AGE_PROPERTY not in managed_properties(table_with(None))
    assert metadata_upkeep(props) == (
        "100 metadata files, manifests merged from 10, snapshots 1m40s"
    )
    assert metadata_upkeep({}).startswith("every metadata file")
    assert DEFAULT_TABLE_PROPERTIES["write.metadata.previous-versions-max"] == "100"


def test_human_duration() -> None:
    assert [human_duration(s) for s in (1, 500, 3600, 150000, 604800)] == [
        "1s",
        "8m20s",
        "1h",
        "1d17h",
        "7d",
    ]
