"""Which masks run while records are decoded, before Spark sees the batch.

A mask on a text column whose clear value no earlier step needs runs inside the decode
task, on the Arrow batch the decoder built (`ChunkDecoder`, with `arrow_masks`), instead
of as a Spark expression after it. Two reasons:

- the clear value never enters the JVM: not its rows, not a shuffle's or a sort's spill
  files on the executors' local disks, not a cached block;
- it is cheaper. Spark's `sha2` under `apply`'s C1-only JIT cannot use the CPU's SHA
  instructions and looks the digest up for every value; Python's `hashlib` (OpenSSL) does
  neither (1M values: ~0.7 s of CPU in the decode tasks, where the three masks of
  `benchmarks/transforms_checks_apply.py` took ~2.8 s of JVM CPU as Spark expressions).
  `partial` and `redact` are vectorized Arrow compute kernels.

A mask step runs there when all of its columns are text columns of the decoded batch
(masking does not change their type), none is an upsert key column (keys are filled from
the Kafka key after decoding), and every step before it in the declared chain leaves the
column alone: a mask of other columns (or of the same column, run there too), a dedup not
keyed on it, a filter or a derive that does not read it (nor derives it), a rename or a
drop that does not name it. The steps in between still see the same values: none of them
reads the column. Everything else runs in Spark (`CompiledTransforms.without`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from tableflow_core.transforms.arrow_masks import ColumnMask, DecodeMasks
from tableflow_core.transforms.compile import (
    CompiledTransforms,
    DedupStep,
    DeriveStep,
    DropStep,
    FilterStep,
    MaskStep,
    RenameStep,
    TransformStep,
)
from tableflow_core.transforms.sql import parse_expression, referenced_columns


def masks_at_decode(
    transforms: CompiledTransforms, excluded: Iterable[str] = ()
) -> tuple[MaskStep, ...]:
    """The mask steps of `transforms` that can run while decoding (see the module
    docstring); `excluded` names columns that must reach Spark in clear (upsert keys)."""
    schema = transforms.input_schema
    kept_clear = frozenset(excluded)
    pushed: list[MaskStep] = []
    for position, step in enumerate(transforms.steps):
        before = transforms.steps[:position]
        if isinstance(step, MaskStep) and all(
            name in schema.names
            and _is_text(schema.field(name).type)
            and name not in kept_clear
            and all(_leaves_alone(earlier, name, pushed) for earlier in before)
            for name in step.columns
        ):
            pushed.append(step)
    return tuple(pushed)


def decode_masks(steps: Iterable[MaskStep]) -> DecodeMasks:
    """What the decode tasks run for `steps` (one ColumnMask per masked column)."""
    return DecodeMasks(
        tuple(
            ColumnMask(
                column=column,
                method=step.method,
                salt=step.salt,
                replacement=step.replacement,
                keep_first=step.keep_first,
                keep_last=step.keep_last,
            )
            for step in steps
            for column in step.columns
        )
    )


def _is_text(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_string(data_type) or pa.types.is_large_string(data_type))


def _leaves_alone(step: TransformStep, column: str, pushed: list[MaskStep]) -> bool:
    """Whether `step`, run before a mask of `column`, leaves that column's value as decoded
    for the mask (or masks it while decoding too, in order)."""
    return _LEAVES_ALONE[type(step)](step, column.lower(), pushed)


def _reads(sql: str, column: str) -> bool:
    """Whether Spark SQL expression `sql` reads `column` (lower case; names resolve
    case-insensitively). A lambda variable of the same name counts: that only keeps the
    mask in Spark."""
    names = referenced_columns(parse_expression(sql, what="expression"))
    return column in {name.lower() for name in names}


def _mask_leaves_alone(step: Any, column: str, pushed: list[MaskStep]) -> bool:
    return column not in _lower(step.columns) or any(step is p for p in pushed)


def _dedup_leaves_alone(step: Any, column: str, pushed: list[MaskStep]) -> bool:
    return column not in _lower(step.keys)


def _filter_leaves_alone(step: Any, column: str, pushed: list[MaskStep]) -> bool:
    return not _reads(step.where, column)


def _derive_leaves_alone(step: Any, column: str, pushed: list[MaskStep]) -> bool:
    return step.column.lower() != column and not _reads(step.expression, column)


def _rename_leaves_alone(step: Any, column: str, pushed: list[MaskStep]) -> bool:
    return column not in _lower(name for pair in step.renames for name in pair)


def _drop_leaves_alone(step: Any, column: str, pushed: list[MaskStep]) -> bool:
    return column not in _lower(step.columns)


def _lower(names: Iterable[str]) -> set[str]:
    return {name.lower() for name in names}


_LEAVES_ALONE: dict[type, Callable[[Any, str, list[MaskStep]], bool]] = {
    MaskStep: _mask_leaves_alone,
    DedupStep: _dedup_leaves_alone,
    FilterStep: _filter_leaves_alone,
    DeriveStep: _derive_leaves_alone,
    RenameStep: _rename_leaves_alone,
    DropStep: _drop_leaves_alone,
}
