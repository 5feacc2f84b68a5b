"""tableflow's errors: one root, `TableflowError`, and the errors of a table's run.

Every exception class tableflow defines derives from `TableflowError` (each area's root
below it: `ConfigError`, `IngestError`, `DeadLetterError`, `PublishError`, ...; they keep
their builtin bases too, so `except ValueError` still catches `PlanFileError`). The
CLI handles them in one place (`cli/main.py`): it prints `user_message()` (secrets
redacted), and, for a component that is down, how to start the local stack, and exits
with `exit_code`. Anything else is a bug and keeps its traceback.

The run's errors live here because both the engine toolbox (`engine/run_branch.py`) and
the pipeline raise them: a run that raises one of these committed nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar


class TableflowError(Exception):
    """An error tableflow raises on purpose, with a message for the user."""

    # The CLI's exit status for it (1: error; 2 is click's, for usage errors).
    exit_code: ClassVar[int] = 1
    # A component (Kafka, registry, catalog) is down: the CLI says "Nothing was changed."
    # and, on a target with a local stack, how to start it.
    component_down: ClassVar[bool] = False
    # Raised before anything changed: the CLI says so ("Nothing was changed.").
    changes_nothing: ClassVar[bool] = False

    def user_message(self) -> str:
        """What the CLI prints after "Error: "."""
        return str(self)


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


class IngestError(TableflowError, RuntimeError):
    """The run failed and committed nothing; `failures` names the records at fault.

    `outcome`: what the run knew when it failed (the pipeline's `IngestOutcome`: offsets
    before, the checks' report, warnings), set by the run frame so run_results.json
    reports a failed run as fully as a passing one; None when it failed before starting."""

    def __init__(
        self, message: str, failures: Sequence[FailedRecord] = (), run_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.failures = tuple(failures)
        self.run_id = run_id
        self.outcome: object | None = None


class DataLossError(IngestError):
    """Records the table was due to read were deleted from the topic (retention) first,
    and the table's `on_data_loss` is `fail`: nothing was read or committed."""

    changes_nothing = True


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


class BindError(TableflowError, RuntimeError):
    """Apply cannot bind a plan's ingest spec to the project (e.g. a salted mask whose
    salt the project no longer gives)."""
