"""Test-side views of the launcher's running servers."""

from __future__ import annotations

from dataclasses import fields
from typing import TypeVar

from tableflow_core.dev.launcher import RunningServer

S = TypeVar("S", bound=RunningServer)


def extend(kind: type[S], server: RunningServer) -> S:
    """`server` as `kind`: a subclass of the server's class that adds methods, not fields."""
    if type(server) not in kind.__bases__:
        raise TypeError(f"{kind.__name__} does not extend {type(server).__name__}")
    return kind(**{f.name: getattr(server, f.name) for f in fields(server)})
