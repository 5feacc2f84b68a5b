"""Masks on Arrow columns, run by the decode tasks (see `transforms/decode_masks.py`).

This module is what Spark's Python workers import to mask: pyarrow and hashlib only (the
compiled transforms import sqlglot, which a decode task has no use for).

The values are exactly those of the Spark expressions (`transforms.spark._run_mask`):
`hash` is hex(SHA-256(salt || UTF-8 value)), `partial` counts characters (code points)
like Spark's `length` and `substring`, and null stays null for all three.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import SecretStr

MaskMethod = Literal["hash", "redact", "partial"]


@dataclass(frozen=True)
class ColumnMask:
    """One mask of one text column."""

    column: str
    method: MaskMethod
    salt: SecretStr | None = None
    replacement: str = "***"
    keep_first: int = 0
    keep_last: int = 0


def _hash(mask: ColumnMask, values: pa.Array) -> pa.Array:
    assert mask.salt is not None, f"mask of {mask.column}: method hash has no salt"
    salt = mask.salt.get_secret_value().encode("utf-8")
    sha256 = hashlib.sha256
    digests = [
        None if v is None else sha256(salt + v.encode("utf-8")).hexdigest()
        for v in values.to_pylist()
    ]
    return pa.array(digests, pa.string())


def _redact(mask: ColumnMask, values: pa.Array) -> pa.Array:
    return pc.if_else(pc.is_null(values), pa.scalar(None, pa.string()), pa.scalar(mask.replacement))


def _partial(mask: ColumnMask, values: pa.Array) -> pa.Array:
    """Keep the first/last characters and star the rest; a value no longer than what would
    be kept is starred entirely (as `transforms.spark.partial_mask`)."""
    kept = mask.keep_first + mask.keep_last
    length = pc.utf8_length(values)
    parts = []
    if mask.keep_first > 0:
        parts.append(pc.utf8_slice_codeunits(values, 0, mask.keep_first))
    parts.append(pc.binary_repeat("*", pc.max_element_wise(pc.subtract(length, kept), 0)))
    if mask.keep_last > 0:
        # A slice from -n to the end: the last n characters.
        parts.append(pc.utf8_slice_codeunits(values, -mask.keep_last, 2**31 - 1))
    joined = pc.binary_join_element_wise(*parts, "")
    return pc.if_else(pc.less_equal(length, kept), pc.binary_repeat("*", length), joined)


ARROW_MASKS: dict[str, Callable[[ColumnMask, pa.Array], pa.Array]] = {
    "hash": _hash,
    "redact": _redact,
    "partial": _partial,
}


@dataclass(frozen=True)
class DecodeMasks:
    """The masks a decode task runs on each batch of good rows, in declared order."""

    masks: tuple[ColumnMask, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.masks)

    def apply(self, schema: pa.Schema, columns: list[pa.Array]) -> list[pa.Array]:
        """`columns` (one array per field of `schema`) with the masks applied."""
        masked = list(columns)
        for mask in self.masks:
            index = schema.get_field_index(mask.column)
            masked[index] = ARROW_MASKS[mask.method](mask, masked[index])
        return masked
