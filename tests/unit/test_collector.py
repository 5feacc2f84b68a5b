"""The collector pause around a plan: off inside, as it was afterwards, nested or not; the
startup heap frozen once a process."""

from __future__ import annotations

import gc

import pytest

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


def test_the_startup_heap_is_frozen_once() -> None:
    gc.unfreeze()
    try:
        startup = [[i] for i in range(10)]
        assert all(gc.is_tracked(o) for o in startup)
        freeze_startup_heap()
        frozen = gc.get_freeze_count()
        assert frozen > len(startup)
        later = [[i] for i in range(1_000)]  # made after the first apply's start
        freeze_startup_heap()
        assert gc.get_freeze_count() == frozen  # the later objects stay collectable
        assert later[0] == [0]
    finally:
        gc.unfreeze()
