"""Where each step of a table's transforms and checks runs (pure).

A table's chain does not all run where it is declared:

- masks of text columns that no earlier step reads run while decoding, in the read tasks
  (`transforms/decode_masks.py`);
- an append table's dedup may run in the read tasks (`pipeline/transforms/read_task_dedup.py`)
  when it is the first step Spark would run and its keys are of a type the read tasks
  group exactly (`key_types.py`);
- `unique` checks on columns the transforms leave alone are proved by the read tasks'
  key reports when no key repeats (`pipeline/checks/read_task_unique.py`);
- the rest runs on Spark, in `execution_order`.

`place()` says which for one run. `plan` shows it (the decode, transform and check
stages of the ingest action) and the pipeline follows the same functions, so what the
plan shows is what runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tableflow_core.checks.compile import CompiledChecks
from tableflow_core.transforms.compile import (
    CompiledTransforms,
    DedupStep,
    DeriveStep,
    DropStep,
    MaskStep,
    RenameStep,
    TransformStep,
)
from tableflow_core.transforms.decode_masks import masks_at_decode
from tableflow_core.transforms.key_types import dedupable_key_type

# Records in one run above which the read tasks do no work on keys (the dedup runs in
# Spark's shuffle, `unique` in its window): the driver would hold 8 bytes per key of the
# run, plus a sort's copies.
MAX_RECORDS = 4_000_000


def execution_order(steps: Sequence[TransformStep]) -> tuple[TransformStep, ...]:
    """The steps in the order they run: a dedup moves ahead of the masks just before it
    whose columns are none of its keys.

    The same rows survive and get the same values either way (a mask changes neither a
    key nor a row's fate), but masking after the dedup masks only the rows kept, and the
    dedup's shuffle then carries the short clear values instead of 64-character hashes
    (measured on 1M rows: 43 MB shuffled instead of 102 MB). A mask on a key column stays
    before the dedup: a partial or redacted key groups rows differently than the clear one.
    """
    ordered = list(steps)
    for index in range(1, len(ordered)):
        at = index
        while at > 0 and _dedup_can_precede(ordered[at], ordered[at - 1]):
            ordered[at - 1], ordered[at] = ordered[at], ordered[at - 1]
            at -= 1
    return tuple(ordered)


def _dedup_can_precede(step: TransformStep, before: TransformStep) -> bool:
    return (
        isinstance(step, DedupStep)
        and isinstance(before, MaskStep)
        and not set(step.keys) & set(before.columns)
    )


def spark_chain(
    transforms: CompiledTransforms, key_columns: Iterable[str] = ()
) -> CompiledTransforms:
    """The chain left for Spark once the masks that run while decoding are taken out
    (never those of `key_columns`: keys are filled from the Kafka key after decoding)."""
    return transforms.without(masks_at_decode(transforms, key_columns))


def read_tasks_work_on_keys(mode: str, compiled: bool, records: int) -> bool:
    """Whether a run's read tasks may work on keys at all (the dedup, `unique` checks): an
    append table with transforms or checks, and a run of at most MAX_RECORDS records."""
    return compiled and mode == "append" and records <= MAX_RECORDS


def read_task_dedup_step(transforms: CompiledTransforms) -> DedupStep | None:
    """The dedup step a read task can run: the first of the chain Spark would run
    (`transforms`: the chain without the masks that ran while decoding), keyed on
    top-level columns of types the read tasks group exactly; else None."""
    steps = execution_order(transforms.steps)
    if not steps or not isinstance(steps[0], DedupStep):
        return None
    step = steps[0]
    schema = transforms.input_schema
    if not all(k in schema.names and dedupable_key_type(schema.field(k).type) for k in step.keys):
        return None
    return step


def columns_written(chain: CompiledTransforms) -> frozenset[str]:
    """Every column name a step of `chain` gives values to, renames or drops (a dedup or
    a filter only takes rows out)."""
    names: set[str] = set()
    for step in chain.steps:
        names |= _WRITTEN_BY.get(type(step), lambda _: set())(step)
    return frozenset(names)


_WRITTEN_BY: dict[type, Callable[[Any], set[str]]] = {
    MaskStep: lambda step: set(step.columns),
    DropStep: lambda step: set(step.columns),
    DeriveStep: lambda step: {step.column},
    RenameStep: lambda step: {name for pair in step.renames for name in pair},
}


def unique_keys_reported(
    transforms: CompiledTransforms, checks: CompiledChecks
) -> tuple[tuple[str, ...], ...]:
    """The columns of each `unique` check the read tasks can prove (given that they work
    on keys in this run): only where no check takes rows out (the checks then judge the
    rows the write appended), on columns no transform touches, of key types the read
    tasks group exactly."""
    if any(check.splits_rows for check in checks.checks):
        return ()
    touched = columns_written(transforms)
    schema = transforms.input_schema
    keys: list[tuple[str, ...]] = []
    for check in checks.checks:
        if check.kind != "unique" or check.columns in keys:
            continue
        if all(
            c in schema.names and c not in touched and dedupable_key_type(schema.field(c).type)
            for c in check.columns
        ):
            keys.append(check.columns)
    return tuple(keys)


@dataclass(frozen=True)
class Placement:
    """Where one run of a table runs each step of its chain and which checks the read
    tasks prove."""

    at_decode: tuple[MaskStep, ...] = ()  # masks run while decoding
    read_task_dedup: DedupStep | None = None  # the dedup the read tasks may run
    in_spark: tuple[TransformStep, ...] = ()  # the rest, in the order Spark runs them
    unique_in_read_tasks: tuple[tuple[str, ...], ...] = ()  # `unique` keys reported


def place(
    transforms: CompiledTransforms | None,
    checks: CompiledChecks | None,
    *,
    mode: str,
    key_columns: Iterable[str],
    records: int,
) -> Placement:
    """Where a run of `records` records runs the table's compiled chain and checks."""
    if transforms is None:
        return Placement()
    at_decode = masks_at_decode(transforms, key_columns)
    chain = transforms.without(at_decode)
    on_keys = read_tasks_work_on_keys(mode, True, records)
    return Placement(
        at_decode=at_decode,
        read_task_dedup=read_task_dedup_step(chain) if on_keys else None,
        in_spark=execution_order(chain.steps),
        unique_in_read_tasks=unique_keys_reported(transforms, checks)
        if on_keys and checks is not None
        else (),
    )
