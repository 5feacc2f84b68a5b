"""tests/unit holds the tests that need no process at all: no JVM, broker, registry or
server; the whole folder runs in seconds (`.venv/bin/python -m pytest tests/unit`).

A test here that starts a process (subprocess, fork: Spark's JVM, a broker, a server) or
opens a TCP socket (a server, or a connection to one) fails, during its fixtures' set-up
too: it belongs in tests/integration. Unix sockets stay allowed (asyncio's event loop
uses a socket pair).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

MOVE = "move the test to tests/integration"


class ProcessInUnitTest(AssertionError):
    pass


def _refuse(what: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ProcessInUnitTest(f"tests/unit must not {what}: {MOVE}")

    return refuse


@contextmanager
def no_processes() -> Iterator[None]:
    saved_popen = subprocess.Popen.__init__
    saved_fork = os.fork
    saved_bind, saved_connect, saved_connect_ex = (
        socket.socket.bind,
        socket.socket.connect,
        socket.socket.connect_ex,
    )

    def inet(original: Any, what: str) -> Any:
        def guarded(self: socket.socket, address: Any) -> Any:
            if self.family in (socket.AF_INET, socket.AF_INET6):
                raise ProcessInUnitTest(f"tests/unit must not {what} {address}: {MOVE}")
            return original(self, address)

        return guarded

    subprocess.Popen.__init__ = _refuse("start a process")  # type: ignore[method-assign]
    os.fork = _refuse("fork")
    socket.socket.bind = inet(saved_bind, "bind a TCP socket to")  # type: ignore[method-assign]
    socket.socket.connect = inet(saved_connect, "connect to")  # type: ignore[method-assign]
    socket.socket.connect_ex = inet(saved_connect_ex, "connect to")  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = saved_popen  # type: ignore[method-assign]
        os.fork = saved_fork
        socket.socket.bind = saved_bind  # type: ignore[method-assign]
        socket.socket.connect = saved_connect  # type: ignore[method-assign]
        socket.socket.connect_ex = saved_connect_ex  # type: ignore[method-assign]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with no_processes():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with no_processes():
        yield


@pytest.fixture
def catalog(tmp_path: Path) -> Any:
    """A pyiceberg SQL catalog (a SQLite file, a file warehouse under tmp_path) holding
    the namespace `ns`: Iceberg tables with no server."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse"
    )
    catalog.create_namespace("ns")
    return catalog
