"""check: the table's quality checks, one stage each (filled in by the checks issue).

A row-level check moves failing rows from `batch.good` to `batch.bad` (stage "check");
a table-level check appends an audit to `batch.audits`, run on the written branch before
publish. Register one with `CHECKS[<config type>] = runner`. Until then plan refuses
checks (plan/capabilities.py), so reaching this runner is a bug.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tableflow_core.pipeline.batch import Batch, StageContext
from tableflow_core.pipeline.registry import stage_runner
from tableflow_core.pipeline.stages import Check

# config check `type` -> (context, the check's stage spec, batch) -> batch
CHECKS: dict[str, Callable[[StageContext, Any, Batch], Batch]] = {}


@stage_runner(Check)
def check(context: StageContext, spec: Check, batch: Batch) -> Batch:
    runner = CHECKS.get(spec.type)
    if runner is None:
        raise NotImplementedError(f"{context.where()}: check {spec.type} is not supported yet")
    return runner(context, spec, batch)
