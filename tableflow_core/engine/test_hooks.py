"""Test-only crash points (never set in production).

`TABLEFLOW_TEST_CRASH_AT=<point>` makes the driver SIGKILL itself at that point of an
ingest run, so tests can prove that a crash anywhere leaves the table exactly-once.
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "TABLEFLOW_TEST_CRASH_AT"


def crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
