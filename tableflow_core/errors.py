"""The engine's errors: a run that raises one of these committed nothing (raised by the
engine toolbox, `engine/run_branch.py`, and the pipeline)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FailedRecord:
    topic: str
    partition: int
    offset: int
    reason: str

    def describe(self) -> str:
        return (
            f"topic {self.topic!r} partition {self.partition} offset {self.offset}: {self.reason}"
        )


class IngestError(RuntimeError):
    """The run failed and committed nothing; `failures` names the records at fault."""

    def __init__(
        self, message: str, failures: Sequence[FailedRecord] = (), run_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.failures = tuple(failures)
        self.run_id = run_id


class ConcurrentCommitError(IngestError):
    """Someone else committed to the table since this run was planned: re-plan and retry."""


class MainMovedError(ConcurrentCommitError):
    """`main` moved while this run wrote its branch (the run's data stays invisible)."""


class KeysAcrossReadTasks(IngestError):
    """The read tasks' dedup was not exact: `keys` keys were kept by more than one task
    (pipeline/transforms/read_task_dedup.py). Nothing was published: the engine runs the table
    again with Spark's shuffle dedup."""

    def __init__(self, message: str, keys: int) -> None:
        super().__init__(message)
        self.keys = keys


class BindError(RuntimeError):
    """Apply cannot bind a plan's ingest spec to the project (e.g. a salted mask whose
    salt the project no longer gives)."""
