"""Which policy applies to a bad record (pure): the table's, or a check's own."""

from __future__ import annotations

from typing import Any, Literal

from tableflow_core.config.project import Table

Policy = Literal["fail", "skip", "dlq"]


def policy_for(table: Table, stage: str, check: Any | None = None) -> Policy:
    """decode / transform: the table's `on_error`; check: its `on_failure`, else the table's."""
    if stage == "check" and check is not None:
        own: Policy | None = getattr(check, "on_failure", None)
        if own is not None:
            return own
    return table.on_error
