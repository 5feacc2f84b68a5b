"""Masks run while decoding (transforms/decode_masks.py, transforms/arrow_masks.py).

Which masks move into the decode tasks, and that the Arrow masks give exactly the values
the Spark expressions give (the slow test runs both on the same strings)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr, TypeAdapter

from tableflow_core.config.models.transforms import Transform
from tableflow_core.config.project import SourceLocation
from tableflow_core.transforms import compile_transforms
from tableflow_core.transforms.arrow_masks import ColumnMask, DecodeMasks
from tableflow_core.transforms.compile import CompiledTransforms
from tableflow_core.transforms.decode_masks import decode_masks, masks_at_decode

if TYPE_CHECKING:
    pass

SALT = "pepper-decode-7c1e"
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("email", pa.string()),
        ("name", pa.string()),
        ("city", pa.string()),
        ("tags", pa.list_(pa.string())),
    ]
)


def compiled(transforms: list[dict[str, Any]], schema: pa.Schema = SCHEMA) -> CompiledTransforms:
    return compile_transforms(
        TypeAdapter(list[Transform]).validate_python(transforms),
        schema,
        lambda key: SourceLocation(Path("tables/t.yml"), 1),
    )


def hashed(value: str) -> str:
    return hashlib.sha256((SALT + value).encode()).hexdigest()


HASH_EMAIL = {"type": "mask", "columns": ["email"], "method": "hash", "salt": SALT}
PARTIAL_NAME = {"type": "mask", "columns": ["name"], "method": "partial", "keep_first": 1}


def pushed_keys(chain: CompiledTransforms, excluded: tuple[str, ...] = ()) -> list[str]:
    return [step.key for step in masks_at_decode(chain, excluded)]


def test_masks_at_the_head_of_the_chain_run_while_decoding() -> None:
    chain = compiled(
        [
            HASH_EMAIL,
            PARTIAL_NAME,
            {"type": "dedup", "keys": ["id"]},
            {"type": "mask", "columns": ["city"], "method": "redact"},
        ]
    )
    # The redact after a dedup on another column runs there too.
    assert pushed_keys(chain) == ["transforms[0]", "transforms[1]", "transforms[3]"]
    rest = chain.without(masks_at_decode(chain))
    assert [step.key for step in rest.steps] == ["transforms[2]"]
    assert rest.input_schema == chain.input_schema
    assert rest.output_schema == chain.output_schema


@pytest.mark.parametrize(
    ("transforms", "expected"),
    [
        # A non-text column changes type when masked: Spark casts it.
        ([{"type": "mask", "columns": ["id"], "method": "hash", "salt": SALT}], []),
        # One column of a step that cannot move keeps the whole step in Spark.
        ([{"type": "mask", "columns": ["email", "id"], "method": "hash", "salt": SALT}], []),
        # A filter reading the clear value sees it; one that does not read it moves.
        ([{"type": "filter", "where": "EMAIL like '%@x'"}, HASH_EMAIL], []),
        ([{"type": "filter", "where": "id > 0"}, HASH_EMAIL], ["transforms[1]"]),
        # A dedup keyed on the column groups by its clear value.
        ([{"type": "dedup", "keys": ["email"]}, HASH_EMAIL], []),
        # A derive reading it, or replacing it; a rename or a drop naming it.
        ([{"type": "derive", "column": "x", "expression": "upper(email)"}, HASH_EMAIL], []),
        ([{"type": "derive", "column": "email", "expression": "name"}, HASH_EMAIL], []),
        (
            [{"type": "derive", "column": "x", "expression": "upper(name)"}, HASH_EMAIL],
            ["transforms[1]"],
        ),
        (
            [
                {"type": "drop", "columns": ["email"]},
                {"type": "rename", "columns": {"name": "email"}},
                HASH_EMAIL,
            ],
            [],
        ),
        (
            [{"type": "rename", "columns": {"name": "full_name"}}, HASH_EMAIL],
            ["transforms[1]"],
        ),
        ([{"type": "drop", "columns": ["city"]}, HASH_EMAIL], ["transforms[1]"]),
        # The same column masked twice: both in declared order, while decoding.
        (
            [PARTIAL_NAME, {"type": "mask", "columns": ["name"], "method": "redact"}],
            ["transforms[0]", "transforms[1]"],
        ),
        # ... unless the first cannot move: the second must run after it, in Spark.
        (
            [
                {"type": "mask", "columns": ["name", "id"], "method": "redact"},
                {"type": "mask", "columns": ["name"], "method": "hash", "salt": SALT},
            ],
            [],
        ),
    ],
)
def test_masks_that_stay_in_spark(transforms: list[dict[str, Any]], expected: list[str]) -> None:
    assert pushed_keys(compiled(transforms)) == expected


def test_upsert_key_columns_reach_spark_in_clear() -> None:
    chain = compiled([HASH_EMAIL, PARTIAL_NAME])
    assert pushed_keys(chain, excluded=("email",)) == ["transforms[1]"]


def apply(masks: list[ColumnMask], values: list[str | None]) -> list[str | None]:
    schema = pa.schema([("c", pa.string())])
    (column,) = DecodeMasks(tuple(masks)).apply(schema, [pa.array(values, pa.string())])
    result: list[str | None] = column.to_pylist()
    return result


def test_arrow_masks_hash_redact_partial() -> None:
    salt = SecretStr(SALT)
    assert apply([ColumnMask("c", "hash", salt=salt)], ["ann@example.com", None, ""]) == [
        hashed("ann@example.com"),
        None,
        hashed(""),
    ]
    assert apply([ColumnMask("c", "redact", replacement="[x]")], ["a", None, ""]) == [
        "[x]",
        None,
        "[x]",
    ]
    partial = ColumnMask("c", "partial", keep_first=3, keep_last=2)
    assert apply([partial], ["+41791234567", "12345", "1234567", None, "日本語テキスト"]) == [
        "+41*******67",
        "*****",
        "123**67",
        None,
        "日本語**スト",
    ]


def test_decode_masks_names_each_column_of_a_step_once() -> None:
    chain = compiled(
        [{"type": "mask", "columns": ["email", "name"], "method": "redact", "replacement": "-"}]
    )
    masks = decode_masks(masks_at_decode(chain))
    assert [(m.column, m.method, m.replacement) for m in masks.masks] == [
        ("email", "redact", "-"),
        ("name", "redact", "-"),
    ]


def partial_reference(value: str, keep_first: int, keep_last: int) -> str:
    """The partial mask as docs/transforms-and-checks.md states it, on code points."""
    if len(value) <= keep_first + keep_last:
        return "*" * len(value)
    tail = value[len(value) - keep_last :] if keep_last else ""
    return value[:keep_first] + "*" * (len(value) - keep_first - keep_last) + tail


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.text(max_size=40)), max_size=20),
    keep_first=st.integers(0, 6),
    keep_last=st.integers(0, 6),
)
def test_partial_counts_characters(
    values: list[str | None], keep_first: int, keep_last: int
) -> None:
    mask = ColumnMask("c", "partial", keep_first=keep_first, keep_last=keep_last)
    assert apply([mask], values) == [
        None if v is None else partial_reference(v, keep_first, keep_last) for v in values
    ]


@settings(max_examples=100, deadline=None)
@given(
    batches=st.lists(st.lists(st.one_of(st.none(), st.text(max_size=12)), max_size=30), max_size=6)
)
def test_hash_is_the_salted_digest_of_each_value_across_batches(
    batches: list[list[str | None]],
) -> None:
    # One mask over several batches, as a decode task runs it: repeated values are
    # remembered between batches, and must hash the same as when first seen.
    masks = DecodeMasks((ColumnMask("c", "hash", salt=SecretStr(SALT)),))
    schema = pa.schema([("c", pa.string())])
    for values in batches:
        (column,) = masks.apply(schema, [pa.array(values, pa.string())])
        assert column.to_pylist() == [None if v is None else hashed(v) for v in values]


def test_hash_stops_remembering_digests_of_values_that_do_not_repeat() -> None:
    mask = ColumnMask("c", "hash", salt=SecretStr(SALT))
    schema = pa.schema([("c", pa.string())])
    for start in range(0, 60_000, 10_000):
        values = [f"order-{i}" for i in range(start, start + 10_000)]
        (column,) = DecodeMasks((mask,)).apply(schema, [pa.array(values)])
        assert column[0].as_py() == hashed(values[0])
    assert mask.cache.hits == 0
    assert not mask.cache.worth_it()


def test_a_mask_of_a_column_the_batch_lacks_raises() -> None:
    schema = pa.schema([("c", pa.string())])
    masks = DecodeMasks((ColumnMask("missing", "redact"),))
    with pytest.raises(KeyError, match="missing"):
        masks.apply(schema, [pa.array(["a"])])


@pytest.mark.parametrize("method", ["hash", "redact", "partial"])
def test_a_large_string_column_stays_one(method: str) -> None:
    schema = pa.schema([("c", pa.large_string())])
    mask = ColumnMask("c", method, salt=SecretStr(SALT), keep_first=1)  # type: ignore[arg-type]
    (column,) = DecodeMasks((mask,)).apply(schema, [pa.array(["abc", None], pa.large_string())])
    assert column.type == pa.large_string()
    assert column[1].as_py() is None and column[0].as_py() != "abc"
