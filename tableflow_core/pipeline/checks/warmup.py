"""Start great-expectations' import early when a command will run checks.

Its import takes ~4 s of CPU. The check stage used to start it on a thread while the
table's write ran, competing with the write for the cores; `apply` and `run` start it
instead as soon as they know a selected table has checks, while the JVM starts and the
plan is made (the main thread mostly waits on the JVM and the network then). `plan`,
`--help` and commands over tables without checks never call this.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tableflow_core.pipeline.checks.run import prepare_great_expectations

if TYPE_CHECKING:
    from tableflow_core.config.project import Table


def prepare_checks_engine(tables: Iterable[Table]) -> bool:
    """Start importing great-expectations on a daemon thread if one of `tables` has checks
    (once per process); True if it did or had. Never raises: an import that fails fails
    again, with its error, where the checks run."""
    if not any(table.checks for table in tables):
        return False

    prepare_great_expectations()
    return True
