"""`tableflow run`: the schedule (pure) and refresh cycles against the real stack."""

from __future__ import annotations

import threading
import time

import pytest

from tableflow_core.runner.schedule import Schedule
from tableflow_core.tasks.run import _Lanes


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


def test_tables_due_soon_join_the_cycle_of_a_table_due_now() -> None:
    schedule = Schedule({"a": 10.0, "b": 10.4, "c": 11.0})
    assert schedule.due(9.9, join_within=0.5) == ()  # none due yet: no early cycle
    assert schedule.due(10.0, join_within=0.5) == ("a", "b")
    assert schedule.due(10.0) == ("a",)


def test_a_refresh_slower_than_its_interval_is_followed_at_once() -> None:
    schedule = Schedule.all_due(["a"], now=0.0)
    # Started at 0, took 25 s with a 10 s interval: the table is behind, refresh again.
    schedule = schedule.after_refresh(["a"], {"a": 10.0}, started=0.0)
    assert schedule.due(25.0) == ("a",)
    assert schedule.seconds_until_next(25.0) == 0.0


def test_a_lane_claims_again_only_once_its_cycle_was_released() -> None:
    """The lane waits for its cycle's report before its next claim (tasks/run.py), so a
    table back from maintenance joins the others instead of going alone."""
    state = _Lanes({"a": "shared", "b": "shared"}, wake={"shared": threading.Event()})
    assert state.claim("shared", ("a", "b"), None) == ("a", "b")
    began = time.monotonic()
    state.wait_released(("a",), 0.05)  # nobody releases: it gives up after the timeout
    assert time.monotonic() - began >= 0.05
    threading.Timer(0.05, state.release, args=(("a", "b"),)).start()
    state.wait_released(("a", "b"), 5.0)
    assert not state.busy and time.monotonic() - began < 5.0
