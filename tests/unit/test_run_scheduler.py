"""`tableflow run`: the schedule (pure) and refresh cycles against the real stack."""

from __future__ import annotations

import pytest

from tableflow_core.runner.schedule import Schedule


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
