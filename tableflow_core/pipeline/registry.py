"""Stage runners, found by the type of their stage spec.

A runner is `(context, spec, batch) -> batch`. Each lives in its own module under
`pipeline/runners/` and registers itself with `@stage_runner(SpecType)`.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tableflow_core.errors import TableflowError
from tableflow_core.ingest.stages import StageSpec
from tableflow_core.pipeline.batch import Batch, StageContext

StageRunner = Callable[[StageContext, Any, Batch], Batch]
S = TypeVar("S", bound=StageSpec)

STAGE_RUNNERS: dict[type[StageSpec], StageRunner] = {}

# Runner modules, imported once on first use (they import pyspark).
RUNNER_MODULES: tuple[str, ...] = (
    "read_ranges",
    "decode",
    "transform",
    "check",
    "route_bad_records",
    "write",
    "publish",
)


class UnknownStageError(TableflowError, LookupError):
    """No runner is registered for a stage spec type."""


def stage_runner(
    spec_type: type[S],
) -> Callable[
    [Callable[[StageContext, S, Batch], Batch]], Callable[[StageContext, S, Batch], Batch]
]:
    def register(
        runner: Callable[[StageContext, S, Batch], Batch],
    ) -> Callable[[StageContext, S, Batch], Batch]:
        STAGE_RUNNERS[spec_type] = runner
        return runner

    return register


def _load_runners() -> None:
    for module in RUNNER_MODULES:  # importing a module registers its runner (idempotent)
        importlib.import_module(f"tableflow_core.pipeline.runners.{module}")


def runner_for(spec: StageSpec) -> StageRunner:
    if type(spec) not in STAGE_RUNNERS:
        _load_runners()
    try:
        return STAGE_RUNNERS[type(spec)]
    except KeyError:
        raise UnknownStageError(f"no runner for stage {spec.label()!r}") from None


def run_stages(context: StageContext, stages: Sequence[StageSpec], batch: Batch) -> Batch:
    """Each stage in turn; its wall seconds go in `context.timings` under its kind. Stages
    before the write only build lazy DataFrames: the Spark work shows under the write."""
    for spec in stages:
        runner = runner_for(spec)
        started = time.perf_counter()
        batch = runner(context, spec, batch)
        name = str(getattr(spec, "kind", type(spec).__name__))
        context.timings[name] = context.timings.get(name, 0.0) + time.perf_counter() - started
    return batch
