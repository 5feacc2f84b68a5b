"""From each check's figure to its result (pure): what every engine that counts failing
rows shares, so a batch judged by Spark's aggregate (`pipeline/checks/run.py`) and one
judged in a shared job's read tasks (`checks/arrow_checks.py`) get the same verdicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tableflow_core.checks.compile import CompiledCheck
from tableflow_core.checks.report import Action, CheckResult, Outcome

# What a row taken out by a failing dlq check says in the dead-letter target.
CHECK_STAGE = "check"
CHECK_ERROR_CLASS = "CheckFailed"


def failed_message(check_name: str) -> str:
    return f"check {check_name} failed"


@dataclass(frozen=True)
class Judged:
    """One check's verdict from the counts: its failing rows (row-level checks) or the
    rows it saw (`row_count`), or the error that kept its figure from being computed."""

    success: bool
    failing: int | None
    observed: int | None
    error: str | None


def judge(check: CompiledCheck, failing: int | None, rows: int) -> Judged:
    """`check` judged from its failing rows (row-level) or the batch's `rows` (row_count)."""
    if check.kind != "row_count":
        return Judged(failing == 0, failing, None, None)
    within = (check.min is None or rows >= check.min) and (check.max is None or rows <= check.max)
    return Judged(within, None, rows, None)


def verdict(check: CompiledCheck, judged: Judged) -> tuple[Outcome, Action]:
    """The check's outcome and what happens to its failing rows: a failing error check
    with on_failure skip/dlq takes its rows out and warns; with fail, it fails the run."""
    if judged.success:
        return "pass", "none"
    if check.severity == "warn":
        return "warn", "none"
    if judged.error is None and check.splits_rows:
        return "warn", "dead_lettered" if check.on_failure == "dlq" else "skipped"
    return "fail", "none"


def detail(check: CompiledCheck, judged: Judged) -> str | None:
    if judged.error:
        return f"the check could not run: {judged.error}"
    if check.kind == "row_count":
        bounds = [
            f"at least {check.min:g}" if check.min is not None else "",
            f"at most {check.max:g}" if check.max is not None else "",
        ]
        return "expected " + " and ".join(b for b in bounds if b)
    return None


def check_results(
    checks: Sequence[CompiledCheck],
    judged: Sequence[Judged],
    rows: int,
    samples: Mapping[str, tuple[dict[str, Any], ...]],
    details: Mapping[int, str] | None = None,
) -> tuple[CheckResult, ...]:
    """Every check's result, in order: `samples` by check name, `details` (by index)
    replacing the one `detail` gives."""
    results = []
    for index, (check, found) in enumerate(zip(checks, judged, strict=True)):
        outcome, action = verdict(check, found)
        results.append(
            CheckResult.of(
                check,
                outcome,
                rows_evaluated=rows,
                failing=None if check.kind == "row_count" else (found.failing or 0),
                action=action,
                observed=found.observed if check.kind == "row_count" else None,
                samples=samples.get(check.name, ()),
                detail=(details or {}).get(index) or detail(check, found),
            )
        )
    return tuple(results)
