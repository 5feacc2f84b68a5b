"""The list of slowest test files names files that exist (a renamed one would lose its place)."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.slow_first import SLOWEST_FIRST

REPO = Path(__file__).resolve().parents[2]


def test_every_slowest_file_exists_once() -> None:
    assert [p for p in SLOWEST_FIRST if not (REPO / p).is_file()] == []
    assert len(set(SLOWEST_FIRST)) == len(SLOWEST_FIRST)
