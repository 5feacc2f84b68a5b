"""The dead-letter package's errors: one base class, one subclass per way it can fail."""

from __future__ import annotations

from dataclasses import dataclass

from tableflow_core.errors import TableflowError


class DeadLetterError(TableflowError, RuntimeError):
    """Bad records could not be routed as the table's policy says."""


@dataclass(frozen=True)
class BadRecordRef:
    """Where a bad record is and why it is bad (no bytes)."""

    topic: str
    partition: int
    offset: int
    stage: str
    error_class: str
    error_message: str

    def describe(self) -> str:
        return (
            f"topic {self.topic!r} partition {self.partition} offset {self.offset} "
            f"({self.stage}): {self.error_class}: {self.error_message}"
        )


class BadRecordsFailure(DeadLetterError):
    """`on_error: fail` met bad records: the run stops and names the first offsets.

    `records` holds the first ones, lowest partition and offset first (for suspension).
    """

    def __init__(self, message: str, records: tuple[BadRecordRef, ...] = ()) -> None:
        super().__init__(message)
        self.records = records


class OriginalRecordMissingError(DeadLetterError):
    """A rejected row's source record is no longer in Kafka (retention, compaction)."""


class DeadLetterDeliveryError(DeadLetterError):
    """The Kafka dead-letter topic did not acknowledge every record."""


class DeadLetterTableError(DeadLetterError):
    """The Iceberg dead-letter table could not be written (or has the wrong shape)."""


class AccountingError(DeadLetterError):
    """A partition's records do not add up: some offsets landed nowhere or twice."""


class SuspensionError(DeadLetterError):
    """A table's suspension could not be recorded or cleared in the catalog."""
