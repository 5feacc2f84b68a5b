"""What a maintenance run did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class OperationResult:
    operation: str
    status: Literal["success", "error"]
    duration_s: float
    metrics: dict[str, Any] = field(default_factory=dict)  # the procedure's output row
    error: str | None = None

    def describe(self) -> str:
        if self.status == "error":
            return f"{self.operation}: failed: {self.error}"
        shown = ", ".join(f"{k}={v}" for k, v in self.metrics.items() if v not in (None, 0))
        return f"{self.operation}: ok in {self.duration_s:.1f}s" + (f" ({shown})" if shown else "")


@dataclass(frozen=True)
class MaintenanceReport:
    identifier: str
    results: tuple[OperationResult, ...]
    offsets_before: dict[int, int] | None
    offsets_after: dict[int, int] | None
    metadata_location: str | None = None  # the table's metadata after maintenance (to publish)

    @property
    def ok(self) -> bool:
        return all(r.status == "success" for r in self.results)

    def summary_line(self) -> str:
        if not self.results:
            return f"{self.identifier}: nothing due"
        done = "; ".join(r.describe() for r in self.results)
        return f"{self.identifier}: {done}"
