"""`tableflow run`: the schedule (pure) and refresh cycles against the real stack."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from tableflow_core.runner.results import RunResults, TableResult
from tableflow_core.runner.schedule import Schedule, cycle_groups, slow_tables
from tableflow_core.tasks.run import CycleReport, RunTask


def test_everything_is_due_at_start_then_each_table_on_its_interval() -> None:
    schedule = Schedule.all_due(["a", "b"], now=100.0)
    assert schedule.due(100.0) == ("a", "b")
    # The refresh started at 100 and took 3 s: next one interval after it started.
    schedule = schedule.after_refresh(["a", "b"], {"a": 60.0, "b": 300.0}, started=100.0)
    assert schedule.due(104.0) == ()
    assert schedule.seconds_until_next(104.0) == pytest.approx(56.0)
    assert schedule.due(160.0) == ("a",)
    schedule = schedule.after_refresh(["a"], {"a": 60.0, "b": 300.0}, started=165.0)
    assert schedule.next_due == {"a": 225.0, "b": 400.0}


def test_a_refresh_slower_than_its_interval_is_followed_at_once() -> None:
    schedule = Schedule.all_due(["a"], now=0.0)
    # Started at 0, took 25 s with a 10 s interval: the table is behind, refresh again.
    schedule = schedule.after_refresh(["a"], {"a": 10.0}, started=0.0)
    assert schedule.due(25.0) == ("a",)
    assert schedule.seconds_until_next(25.0) == 0.0


def test_a_slow_table_and_one_with_maintenance_due_get_cycles_of_their_own() -> None:
    durations = {"a": 1.2, "b": 1.5, "checked": 9.0}
    intervals = dict.fromkeys(durations, 1.0)
    assert slow_tables(durations, intervals) == {"checked"}
    # Slower than the median but within its interval: not held apart.
    assert slow_tables(durations, {**intervals, "checked": 10.0}) == frozenset()
    assert slow_tables({"only": 30.0}, {"only": 1.0}) == frozenset()
    assert cycle_groups(["checked", "b", "a"], {"checked"}) == [("a", "b"), ("checked",)]
    assert cycle_groups(["a", "b"], {"a", "b"}) == [("a",), ("b",)]
    assert cycle_groups([], {"a"}) == []


def test_seconds_until_next_skips_tables_whose_refresh_is_running() -> None:
    schedule = Schedule({"a": 10.0, "b": 30.0})
    assert schedule.seconds_until_next(5.0, excluding={"a"}) == pytest.approx(25.0)
    assert schedule.seconds_until_next(5.0, excluding={"a", "b"}) == 3600.0


@dataclass
class TimedRun(RunTask):
    """The scheduler with refreshes that only take time: `costs[name]` seconds a table."""

    costs: dict[str, float] = field(default_factory=dict)
    started: list[tuple[str, ...]] = field(default_factory=list)
    maintenance_due_after_first: tuple[str, ...] = ()

    def _refresh(self, due: tuple[str, ...], spark: Any) -> CycleReport:
        self.started.append(due)
        time.sleep(max(self.costs[name] for name in due))
        tables = tuple(
            TableResult(table=name, identifier=name, status="success", duration_s=self.costs[name])
            for name in due
        )
        results = RunResults(
            project="p", target="t", started_at="", finished_at="", duration_s=0.0,
            status="success", plan_summary="", tables=tables,
        )  # fmt: skip
        due_now = self.maintenance_due_after_first if len(self.started) == 1 else ()
        return CycleReport(due, results=results, maintenance_due=due_now)


def test_a_slow_table_does_not_hold_back_the_others() -> None:
    """Three tables at 0.1 s; `slow` takes 1.5 s a refresh. After the first cycle (all
    three: nothing is known yet) `slow` runs alone and the others keep their interval
    beside it, two cycles in flight at once."""
    tables = tuple(SimpleNamespace(name=n, refresh_interval_s=0.1) for n in ("a", "b", "slow"))
    run = TimedRun(
        project=None,  # type: ignore[arg-type]
        tables=tables,  # type: ignore[arg-type]
        spark_factory=lambda: None,  # type: ignore[arg-type,return-value]
        costs={"a": 0.05, "b": 0.05, "slow": 1.5},
    )
    stopper = threading.Timer(4.0, run.stop.set)
    stopper.start()
    reports = run.run()
    stopper.cancel()
    assert run.started[0] == ("a", "b", "slow")
    assert run.started[1:3] == [("a", "b"), ("slow",)]
    groups = run.started[1:]
    assert ("slow",) in groups and groups.count(("slow",)) <= 2
    # Over ~2.5 s beside the slow table, the others refreshed many times (not twice).
    assert groups.count(("a", "b")) >= 8, run.started
    assert all(r.duration_s > 0 for r in reports)
    # Every cycle that started ended before run() returned (stop waits for them).
    assert len(reports) == len(run.started)


def test_a_table_with_maintenance_due_is_refreshed_and_maintained_alone_next() -> None:
    tables = tuple(SimpleNamespace(name=n, refresh_interval_s=0.2) for n in ("a", "b"))
    run = TimedRun(
        project=None,  # type: ignore[arg-type]
        tables=tables,  # type: ignore[arg-type]
        spark_factory=lambda: None,  # type: ignore[arg-type,return-value]
        costs={"a": 0.01, "b": 0.01},
        maintenance_due_after_first=("b",),
        max_cycles=4,
    )
    run.run()
    assert run.started[0] == ("a", "b")
    assert sorted(run.started[1:3]) == [("a",), ("b",)]  # b's maintenance: its own cycle
    assert run.started[3] == ("a", "b")  # then together again
