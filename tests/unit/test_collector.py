"""The collector pause around a plan: off inside, as it was afterwards, nested or not."""

from __future__ import annotations

import gc

import pytest

from tableflow_core.collector import paused_collector


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
