"""The dead-letter package's errors: one base class, one subclass per way it can fail."""

from __future__ import annotations


class DeadLetterError(RuntimeError):
    """Bad records could not be routed as the table's policy says."""


class BadRecordsFailure(DeadLetterError):
    """`on_error: fail` met bad records: the run stops and names the first offsets."""


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
