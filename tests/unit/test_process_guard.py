"""tests/unit stays process-free: its conftest refuses a process or a TCP socket."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from tests.unit.conftest import ProcessInUnitTest


def test_a_unit_test_cannot_start_a_process_or_open_a_tcp_socket() -> None:
    with pytest.raises(ProcessInUnitTest, match="start a process"):
        subprocess.run(["true"], check=False)
    with pytest.raises(ProcessInUnitTest, match="fork"):
        os.fork()
    with socket.socket() as server, pytest.raises(ProcessInUnitTest, match="bind"):
        server.bind(("127.0.0.1", 0))
    with pytest.raises(ProcessInUnitTest, match="connect"):
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    left, right = socket.socketpair()  # Unix sockets stay allowed (asyncio uses them)
    left.close()
    right.close()
