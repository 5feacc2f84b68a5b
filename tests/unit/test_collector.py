"""The collector pause around a plan: off inside, as it was afterwards, nested or not; the
startup heap frozen once a process."""

from __future__ import annotations

import gc

import pytest

from tableflow_core import collector
from tableflow_core.collector import freeze_startup_heap, paused_collector


def test_the_collector_is_off_inside_and_restored_after() -> None:
    assert gc.isenabled()
    with paused_collector():
        assert not gc.isenabled()
        with paused_collector():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause leaves the outer one alone
    assert gc.isenabled()


def test_an_error_inside_restores_it() -> None:
    with pytest.raises(ValueError), paused_collector():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with paused_collector():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def _collectable_ids() -> set[int]:
    """Ids of the objects the collector's passes traverse (the frozen ones are not among them)."""
    return {id(o) for o in gc.get_objects()}


def test_the_startup_heap_is_frozen_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Compared by membership, not by gc.get_freeze_count(): frozen objects are still freed by
    # reference counting (other threads of a test session free some), so the count may fall.
    monkeypatch.setattr(collector, "_startup_frozen", False)  # as in a new process
    gc.unfreeze()
    try:
        startup = [[i] for i in range(10)]
        assert all(gc.is_tracked(o) for o in startup)
        freeze_startup_heap()
        collectable = _collectable_ids()
        assert not any(id(o) in collectable for o in startup)
        later = [[i] for i in range(1_000)]  # made after the first apply's start
        freeze_startup_heap()
        collectable = _collectable_ids()
        assert all(id(o) in collectable for o in later)  # the later objects stay collectable
    finally:
        gc.unfreeze()
