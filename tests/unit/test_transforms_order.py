"""The order the compiled transform steps run in (no Spark): a dedup runs before the masks
just ahead of it unless they mask one of its keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import TypeAdapter

from tableflow_core.config.models.transforms import Transform
from tableflow_core.config.project import SourceLocation
from tableflow_core.ingest.placement import execution_order
from tableflow_core.pipeline.transforms.spark import possible_fates
from tableflow_core.transforms import compile_transforms
from tableflow_core.transforms.compile import DedupStep, MaskStep

SCHEMA = pa.schema(
    [("id", pa.int64()), ("user", pa.string()), ("city", pa.string()), ("kind", pa.string())]
)
TRANSFORMS = TypeAdapter(list[Transform])


def steps(transforms: list[dict[str, Any]]) -> Any:
    compiled = compile_transforms(
        TRANSFORMS.validate_python(transforms),
        SCHEMA,
        lambda key: SourceLocation(Path("tables/t.yml"), 1),
    )
    return compiled.steps


def described(ordered: Any) -> list[str]:
    return [step.describe() for step in ordered]


HASH_USER = {"type": "mask", "columns": ["user"], "method": "hash", "salt": "s"}
PARTIAL_CITY = {"type": "mask", "columns": ["city"], "method": "partial", "keep_first": 2}
DEDUP_ID = {"type": "dedup", "keys": ["id"], "keep": "last"}


def test_a_dedup_runs_before_the_masks_ahead_of_it() -> None:
    configured = steps([HASH_USER, PARTIAL_CITY, DEDUP_ID])
    ordered = execution_order(configured)
    assert isinstance(ordered[0], DedupStep)
    assert described(ordered[1:]) == described(configured[:2])  # masks keep their order


def test_a_mask_on_a_dedup_key_stays_before_the_dedup() -> None:
    on_key = {"type": "mask", "columns": ["city"], "method": "redact"}
    dedup_city = {"type": "dedup", "keys": ["city"], "keep": "first"}
    configured = steps([on_key, HASH_USER, dedup_city])
    ordered = execution_order(configured)
    # The dedup passes the hash of `user` but not the redaction of its own key.
    assert [type(s) for s in ordered] == [MaskStep, DedupStep, MaskStep]
    assert described(ordered) == described([configured[0], configured[2], configured[1]])
    # Masks are not reordered among themselves: the key's mask blocks the way.
    blocked = steps([HASH_USER, on_key, dedup_city])
    assert execution_order(blocked) == blocked


def test_other_steps_keep_their_place() -> None:
    configured = steps([HASH_USER, {"type": "filter", "where": "id > 0"}, PARTIAL_CITY, DEDUP_ID])
    ordered = execution_order(configured)
    # The filter is not moved over, and the dedup does not jump it.
    assert described(ordered) == described(
        [configured[0], configured[1], configured[3], configured[2]]
    )
    assert execution_order(steps([DEDUP_ID, HASH_USER])) == steps([DEDUP_ID, HASH_USER])


def test_only_the_fates_a_chain_can_give_are_counted() -> None:
    """Each fate counted is an aggregate on every row of the batch (pipeline/transforms/spark.py)."""
    assert possible_fates(steps([HASH_USER, PARTIAL_CITY])) == frozenset()
    assert possible_fates(steps([HASH_USER, DEDUP_ID])) == {"duplicate"}
    assert possible_fates(steps([{"type": "filter", "where": "id > 0"}])) == {"filtered"}
    # A plain CAST that fails in a filter rejects the row; a derived value may not fit.
    assert possible_fates(steps([{"type": "filter", "where": "CAST(city AS INT) > 0"}])) == {
        "filtered",
        "rejected",
    }
    assert possible_fates(
        steps([{"type": "derive", "column": "n", "expression": "length(city)"}, DEDUP_ID])
    ) == {"rejected", "duplicate"}
