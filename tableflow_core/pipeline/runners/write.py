"""write: the good rows go to the run's private branch, by the table's mode.

Modes are found in `WRITE_MODES` (`write_append.py`, `write_upsert.py`). A mode writes
`batch.good` (hidden `__tf_*` columns dropped before they reach the table) and makes the
branch's head snapshot carry the run's offsets (`commit_properties`), so publish moves
data and offsets together.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from tableflow_core.ingest.stages import Write
from tableflow_core.pipeline.batch import Batch, StageContext
from tableflow_core.pipeline.registry import stage_runner
from tableflow_core.state.offsets import OFFSETS_KEY, encode_offsets

WriteMode = Callable[[StageContext, Write, Batch], Batch]
WRITE_MODES: dict[str, WriteMode] = {}
MODE_MODULES = ("write_append", "write_upsert")


def write_mode(name: str) -> Callable[[WriteMode], WriteMode]:
    def register(mode: WriteMode) -> WriteMode:
        WRITE_MODES[name] = mode
        return mode

    return register


def commit_properties(context: StageContext, batch: Batch | None = None) -> dict[str, str]:
    """Snapshot properties of the commit that carries the run's offsets (and what the
    stages before the write reported, e.g. the checks' summary)."""
    extra = dict(batch.snapshot_properties) if batch is not None else {}
    return {**extra, OFFSETS_KEY: encode_offsets(context.spec.topic, dict(context.offsets_after))}


@stage_runner(Write)
def write(context: StageContext, spec: Write, batch: Batch) -> Batch:
    if spec.mode not in WRITE_MODES:
        for module in MODE_MODULES:
            importlib.import_module(f"tableflow_core.pipeline.runners.{module}")
    mode = WRITE_MODES.get(spec.mode)
    if mode is None:
        raise NotImplementedError(f"{context.where()}: mode {spec.mode} is not supported")
    assert batch.good is not None, "write needs the decode stage before it"
    return mode(context, spec, batch)
