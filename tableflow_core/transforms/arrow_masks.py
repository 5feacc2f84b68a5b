"""Masks on Arrow columns, run by the decode tasks (see `transforms/decode_masks.py`).

This module is what Spark's Python workers import to mask: pyarrow and hashlib only (the
compiled transforms import sqlglot, which a decode task has no use for).

The values are exactly those of the Spark expressions (`pipeline.transforms.spark._run_mask`):
`hash` is hex(SHA-256(salt || UTF-8 value)), `partial` counts characters (code points)
like Spark's `length` and `substring`, and null stays null for all three.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import SecretStr

MaskMethod = Literal["hash", "redact", "partial"]


# Digests a hash mask remembers in a decode task (one task's batch: up to 250k records);
# forgotten all at once when full. ~20 MB at most for short values.
DIGEST_CACHE_SIZE = 100_000
# After this many values, the cache is only used while at least a fifth of them hit it.
_CACHE_TRIAL = 50_000


@dataclass
class DigestCache:
    """One decode task's digests of a hash mask, by value."""

    digests: dict[str, str] = field(default_factory=dict)
    looked_up: int = 0
    hits: int = 0

    def worth_it(self) -> bool:
        return self.looked_up < _CACHE_TRIAL or self.hits * 5 >= self.looked_up


@dataclass(frozen=True)
class ColumnMask:
    """One mask of one text column."""

    column: str
    method: MaskMethod
    salt: SecretStr | None = None
    replacement: str = "***"
    keep_first: int = 0
    keep_last: int = 0
    # hash: the task's digests (the driver ships an empty cache; each task fills its own).
    cache: DigestCache = field(default_factory=DigestCache, compare=False, repr=False)


def _hash(mask: ColumnMask, values: pa.Array) -> pa.Array:
    """Each distinct value of a batch is hashed once, and a task remembers its digests
    while values repeat across batches: a column of user ids, emails or card numbers
    repeats its values (1M records of 5k users: ~0.7 s of CPU hashing every value, ~0.1 s
    this way; all distinct: ~0.55 s)."""
    assert mask.salt is not None, f"mask of {mask.column}: method hash has no salt"
    salt = mask.salt.get_secret_value().encode("utf-8")
    sha256 = hashlib.sha256
    encoded = values.dictionary_encode()
    distinct = encoded.dictionary.to_pylist()
    cache = mask.cache
    if cache.worth_it():
        digests = cache.digests
        if len(digests) + len(distinct) > DIGEST_CACHE_SIZE:
            digests.clear()
        hashed = [digests.get(value) for value in distinct]
        cache.looked_up += len(distinct)
        cache.hits += len(distinct) - hashed.count(None)
        for index, value in enumerate(distinct):
            if hashed[index] is None:
                hashed[index] = digests[value] = sha256(salt + value.encode()).hexdigest()
    else:
        hashed = [sha256(salt + value.encode()).hexdigest() for value in distinct]
    # A null value has a null index: it stays null.
    return pc.take(pa.array(hashed, pa.string()), encoded.indices)


def _redact(mask: ColumnMask, values: pa.Array) -> pa.Array:
    return pc.if_else(pc.is_null(values), pa.scalar(None, pa.string()), pa.scalar(mask.replacement))


def _partial(mask: ColumnMask, values: pa.Array) -> pa.Array:
    """Keep the first/last characters and star the rest; a value no longer than what would
    be kept is starred entirely (as `pipeline.transforms.spark.partial_mask`)."""
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
            if index < 0:  # never mask another column than the one named
                raise KeyError(f"mask of {mask.column!r}: no such column in the decoded batch")
            values = masked[index]
            # The kernels work on string; the batch keeps its schema (large_string stays).
            result = ARROW_MASKS[mask.method](mask, values.cast(pa.string()))
            masked[index] = result if result.type == values.type else result.cast(values.type)
        return masked
