"""Suspending a table under `tableflow run` (on_error: fail) and reading why (plan).

The suspension is a table property, `tableflow.suspended`, set through the catalog: any
machine running `plan` or `run` sees it, and a property change adds no snapshot, so it
never moves `main` and the next run's fast-forward publishing is unaffected.
`run` skips suspended tables and keeps the others running; an `apply` that succeeds
for the table clears it (`clear_suspension`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from tableflow_core.catalog.transactions import transaction as transaction_of
from tableflow_core.deadletter.errors import BadRecordsFailure, SuspensionError

SUSPENDED_PROPERTY = "tableflow.suspended"


@dataclass(frozen=True)
class Suspension:
    """Why a table stopped: the record at fault and the error."""

    reason: str
    topic: str
    partition: int | None
    offset: int | None
    run_id: str
    suspended_at: str  # ISO-8601, UTC

    @classmethod
    def now(
        cls, reason: str, topic: str, partition: int | None, offset: int | None, run_id: str
    ) -> Suspension:
        return cls(reason, topic, partition, offset, run_id, datetime.now(UTC).isoformat())

    @classmethod
    def from_failure(cls, failure: BadRecordsFailure, topic: str, run_id: str) -> Suspension:
        """The suspension for a run stopped by `on_error: fail` (its first bad record)."""
        if not failure.records:
            return cls.now(str(failure), topic, None, None, run_id)
        first = failure.records[0]
        reason = f"{first.error_class}: {first.error_message} ({first.stage})"
        return cls.now(reason, first.topic, first.partition, first.offset, run_id)

    def encode(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def where(self) -> str:
        if self.partition is None:
            return f"topic {self.topic!r}"
        if self.offset is None:
            return f"topic {self.topic!r} partition {self.partition}"
        return f"topic {self.topic!r} partition {self.partition} offset {self.offset}"

    def describe(self) -> str:
        """One line for `plan` and `run` output."""
        return (
            f"suspended since {self.suspended_at} (run {self.run_id}): {self.where()}: "
            f"{self.reason}. Fix the cause (or set on_error: skip/dlq) and run "
            "`tableflow apply` for this table to resume."
        )


def read_suspension(properties: Mapping[str, str]) -> Suspension | None:
    """The table's suspension from its properties (pure: plan passes what it observed)."""
    raw = properties.get(SUSPENDED_PROPERTY)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return Suspension(**data)
    except (ValueError, TypeError) as exc:
        # Someone edited the property by hand: still suspended, with what it says.
        return Suspension(
            f"unreadable suspension record ({exc}): {raw[:200]}", "?", None, None, "?", "?"
        )


def describe_suspension(properties: Mapping[str, str]) -> str | None:
    """ "suspended since ... because ..." for plan, or None when the table runs normally."""
    suspension = read_suspension(properties)
    return None if suspension is None else suspension.describe()


def _catalog(catalog: Any, address: str | None) -> str:
    # `address` is CatalogHandle.address (never carries secrets); the catalog's own
    # properties may (a SQL catalog's database URI), so they are not shown.
    name = getattr(catalog, "name", "?")
    return f"catalog {name!r} at {address}" if address else f"catalog {name!r}"


def _load(catalog: Any, identifier: str, address: str | None) -> Any:
    try:
        return catalog.load_table(identifier)
    except Exception as exc:
        raise SuspensionError(
            f"table {identifier}: cannot load it from {_catalog(catalog, address)}: {exc}"
        ) from exc


def suspend(
    catalog: Any, identifier: str, suspension: Suspension, address: str | None = None
) -> None:
    """Record the suspension on the table (a pyiceberg catalog; no snapshot is added)."""
    table = _load(catalog, identifier, address)
    try:
        with transaction_of(table) as transaction:
            transaction.set_properties({SUSPENDED_PROPERTY: suspension.encode()})
    except Exception as exc:
        raise SuspensionError(
            f"table {identifier}: cannot record its suspension in {_catalog(catalog, address)} "
            f"({suspension.where()}: {suspension.reason}): {exc}"
        ) from exc


def clear_suspension(catalog: Any, identifier: str, address: str | None = None) -> bool:
    """Remove the suspension; True if there was one."""
    table = _load(catalog, identifier, address)
    if SUSPENDED_PROPERTY not in table.properties:
        return False
    try:
        with transaction_of(table) as transaction:
            transaction.remove_properties(SUSPENDED_PROPERTY)
    except Exception as exc:
        raise SuspensionError(
            f"table {identifier}: cannot clear its suspension in {_catalog(catalog, address)}: "
            f"{exc}"
        ) from exc
    return True


def current_suspension(
    catalog: Any, identifier: str, address: str | None = None
) -> Suspension | None:
    return read_suspension(_load(catalog, identifier, address).properties)
