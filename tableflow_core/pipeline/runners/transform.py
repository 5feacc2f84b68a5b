"""transform: the table's transforms, one stage each (filled in by the transforms issue).

A transform runner maps `batch.good` to a new DataFrame, keeping the hidden `__tf_*`
columns; rows it rejects are added to `batch.bad` (BAD_RECORD_SCHEMA, stage "transform").
Register one with `TRANSFORMS[<config type>] = runner`. Until then plan refuses
transforms (plan/capabilities.py), so reaching this runner is a bug.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tableflow_core.pipeline.batch import Batch, StageContext
from tableflow_core.pipeline.registry import stage_runner
from tableflow_core.pipeline.stages import Transform

# config transform `type` -> (context, the table's transform config, batch) -> batch
TRANSFORMS: dict[str, Callable[[StageContext, Any, Batch], Batch]] = {}


@stage_runner(Transform)
def transform(context: StageContext, spec: Transform, batch: Batch) -> Batch:
    runner = TRANSFORMS.get(spec.type)
    if runner is None:
        raise NotImplementedError(f"{context.where()}: transform {spec.type} is not supported yet")
    return runner(context, spec, batch)
