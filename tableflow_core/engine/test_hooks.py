"""Test-only crash points (never set in production).

`TABLEFLOW_TEST_CRASH_AT=<point>` makes the driver SIGKILL itself at that point of an
ingest run, so tests can prove that a crash anywhere leaves the table exactly-once.
`TABLEFLOW_TEST_SIGNAL_AT=<point>` makes it send itself SIGTERM there instead (once), as an
operator stopping `tableflow run` while a commit is in flight.
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "TABLEFLOW_TEST_CRASH_AT"
SIGNAL_ENV = "TABLEFLOW_TEST_SIGNAL_AT"


def crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(SIGNAL_ENV) == name:
        del os.environ[SIGNAL_ENV]  # once: the cycle it interrupts goes on to its end
        os.kill(os.getpid(), signal.SIGTERM)


def crash_session_point(name: str) -> None:
    """`crash_point` for code inside a Spark task (a Python worker, which does not know
    the driver's pid and runs in a process group of its own): SIGKILL the leader of the
    session, the driver (tests run the CLI with a session of its own), then this worker."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getsid(0), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
