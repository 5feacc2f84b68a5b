"""What the checks found in one batch: per-check results, the run's verdict, its records.

Pure values: `run_results.json` takes `CheckReport.as_dict()`, the commit's snapshot
summary takes `summary_properties()`, and a failing run raises `ChecksFailedError`
whose message names the table, each failing check, its failing count and sample rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from tableflow_core.checks.compile import CompiledCheck
from tableflow_core.errors import TableflowError

Outcome = Literal["pass", "warn", "fail"]
Action = Literal["none", "skipped", "dead_lettered"]

SUMMARY_PREFIX = "tableflow.checks"
# Failing rows a check's result shows, whichever engine judged it.
SAMPLES_PER_CHECK = 3
# Snapshot summary values are strings kept in table metadata: stay short.
SUMMARY_MAX_CHARS = 500


@dataclass(frozen=True)
class CheckResult:
    name: str
    kind: str
    key: str
    severity: Literal["error", "warn"]
    on_failure: Literal["fail", "skip", "dlq"]
    rows_evaluated: int
    # Rows failing a row-level check; None for a batch-level check (row_count).
    failing: int | None
    outcome: Outcome
    action: Action = "none"
    observed: int | None = None
    samples: tuple[dict[str, Any], ...] = ()
    detail: str | None = None

    @classmethod
    def of(
        cls,
        check: CompiledCheck,
        outcome: Outcome,
        rows_evaluated: int = 0,
        failing: int | None = None,
        **found: Any,
    ) -> CheckResult:
        """`check`'s result: its name, kind, key, severity and on_failure, and what was found."""
        return cls(
            name=check.name,
            kind=check.kind,
            key=check.key,
            severity=check.severity,
            on_failure=check.on_failure,
            rows_evaluated=rows_evaluated,
            failing=failing,
            outcome=outcome,
            **found,
        )

    def as_dict(self) -> dict[str, Any]:
        """Every field in order, `kind` named `type` (the config's word), samples JSON-safe."""
        found = {
            "type" if f.name == "kind" else f.name: getattr(self, f.name) for f in fields(self)
        }
        return {**found, "samples": [json_safe(s) for s in self.samples]}

    def line(self) -> str:
        if self.failing is None:
            found = f"observed {self.observed} rows" + (f" ({self.detail})" if self.detail else "")
        else:
            found = f"{self.failing:,} of {self.rows_evaluated:,} rows failing"
        action = {"none": "", "skipped": ", rows skipped", "dead_lettered": ", rows dead-lettered"}
        return f"{self.name} [{self.severity}] {self.outcome}: {found}{action[self.action]}"


@dataclass(frozen=True)
class CheckReport:
    table: str
    results: tuple[CheckResult, ...]
    rows_evaluated: int
    rows_skipped: int = 0
    rows_dead_lettered: int = 0
    duration_s: float = 0.0
    engine: str = field(default="spark")

    @property
    def outcome(self) -> Outcome:
        outcomes = {r.outcome for r in self.results}
        return "fail" if "fail" in outcomes else "warn" if "warn" in outcomes else "pass"

    @property
    def blocks_publish(self) -> bool:
        """A check with severity error and on_failure fail failed: publish nothing."""
        return self.outcome == "fail"

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "outcome": self.outcome,
            "rows_evaluated": self.rows_evaluated,
            "rows_skipped": self.rows_skipped,
            "rows_dead_lettered": self.rows_dead_lettered,
            "duration_s": round(self.duration_s, 3),
            "engine": self.engine,
            "checks": [r.as_dict() for r in self.results],
        }

    def summary_properties(self) -> dict[str, str]:
        """Short snapshot-summary properties for the commit that publishes the batch."""
        counts = {
            o: sum(1 for r in self.results if r.outcome == o) for o in ("pass", "warn", "fail")
        }
        properties = {
            SUMMARY_PREFIX: f"{self.outcome}: {counts['pass']} passed, {counts['warn']} warned, "
            f"{counts['fail']} failed",
        }
        noted = [
            f"{r.name}={r.failing if r.failing is not None else r.observed}"
            for r in self.results
            if r.outcome != "pass"
        ]
        if noted:
            properties[f"{SUMMARY_PREFIX}.failing"] = _clip(";".join(noted))
        if self.rows_skipped:
            properties[f"{SUMMARY_PREFIX}.skipped-rows"] = str(self.rows_skipped)
        if self.rows_dead_lettered:
            properties[f"{SUMMARY_PREFIX}.dead-lettered-rows"] = str(self.rows_dead_lettered)
        return properties

    def warnings(self) -> list[str]:
        """One line per check that warned, or took rows out (run_results.json `warnings`
        and the console)."""
        return [
            f"table {self.table}: check {result.line()}"
            for result in self.results
            if result.outcome == "warn"
        ]

    def failure_message(self) -> str:
        """Why nothing was published: table, each failing check, its count and sample rows.

        The first line names every failing check (one-line error reports keep only the
        first lines); sample rows follow, per check."""
        failed = [result for result in self.results if result.outcome == "fail"]
        named = "; ".join(result.line() for result in failed)
        lines = [f"table {self.table}: data-quality checks failed ({named}); nothing was published"]
        for result in failed:
            lines.append(f"  {result.name}:")
            for sample in result.samples:
                lines.append(f"    e.g. {json.dumps(json_safe(sample), sort_keys=True)}")
        return "\n".join(lines)

    def raise_for_failures(self) -> None:
        if self.blocks_publish:
            raise ChecksFailedError(self)


def empty_batch_report(checks: Sequence[CompiledCheck], table: str) -> CheckReport:
    """The checks' verdict on a run with no new records (`CompiledCheck`s, 0 rows): a
    row-level check has no row to fail; `row_count` judges 0 rows against its bounds,
    as great-expectations' ExpectTableRowCountToBeBetween would."""
    results = []
    for check in checks:
        if check.kind != "row_count":
            results.append(CheckResult.of(check, "pass", failing=0))
            continue
        fits = (check.min is None or check.min <= 0) and (check.max is None or check.max >= 0)
        outcome: Outcome = "pass" if fits else "warn" if check.severity == "warn" else "fail"
        bounds = [
            f"at least {check.min:g}" if check.min is not None else "",
            f"at most {check.max:g}" if check.max is not None else "",
        ]
        detail = "no new records; expected " + " and ".join(b for b in bounds if b)
        results.append(CheckResult.of(check, outcome, observed=0, detail=detail))
    return CheckReport(table=table, results=tuple(results), rows_evaluated=0, engine="none")


class ChecksFailedError(TableflowError, RuntimeError):
    """A check with severity error (on_failure fail) failed: the batch must not be published."""

    def __init__(self, report: CheckReport) -> None:
        self.report = report
        super().__init__(report.failure_message())


def _clip(text: str) -> str:
    return text if len(text) <= SUMMARY_MAX_CHARS else text[: SUMMARY_MAX_CHARS - 3] + "..."


def json_safe(value: Any) -> Any:
    """Sample values as JSON (decimals and timestamps as text, bytes as hex)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, decimal.Decimal | dt.date | dt.datetime | dt.time):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    return value
