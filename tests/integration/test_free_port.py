"""`free_port`: a port free now, outside the range the OS hands out on its own (real
sockets on loopback)."""

from __future__ import annotations

import random
import socket

import pytest

from tableflow_core.dev import processes
from tableflow_core.dev.processes import ephemeral_ports, free_port


def test_a_free_port_is_outside_the_ephemeral_range_and_can_be_bound() -> None:
    low, high = ephemeral_ports()
    for _ in range(20):
        port = free_port()
        assert not low <= port <= high, (port, low, high)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_taken_port_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        other = free_port()
        picks = iter([busy, busy, other])
        monkeypatch.setattr(random, "choice", lambda _choices: next(picks))
        assert free_port() == other


def test_with_no_port_free_outside_the_range_the_os_picks_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        monkeypatch.setattr(random, "choice", lambda _choices: busy)
        monkeypatch.setattr(processes, "_TRIES", 3)
        low, high = ephemeral_ports()
        assert low <= free_port() <= high
