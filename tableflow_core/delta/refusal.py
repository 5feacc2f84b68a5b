"""Whether a table may have the `delta` format: a pure check the planner calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class DeltaCandidate(Protocol):
    """What the check reads of a table (config.project.Table fits)."""

    @property
    def name(self) -> str: ...

    @property
    def mode(self) -> str: ...


# Each rule returns a reason when the table cannot be mirrored as Delta, else None.
_RULES: tuple[Callable[[DeltaCandidate], str | None], ...] = (
    lambda t: (
        (
            f"table {t.name!r}: format delta is not available for mode upsert: Iceberg applies "
            "upserts with position delete files, which have no Delta equivalent here (tableflow "
            "does not write Delta deletion vectors); use mode append, or read the table as Iceberg"
        )
        if t.mode == "upsert"
        else None
    ),
)


def delta_refusal(table: DeltaCandidate) -> str | None:
    """Why `table` cannot have the `delta` format, or None when it can."""
    for rule in _RULES:
        reason = rule(table)
        if reason is not None:
            return reason
    return None
