"""The Arrow masks run while decoding give exactly the values the Spark expressions give
(both run on the same strings; which masks move into the decode tasks is
tests/unit/test_decode_masks.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from tableflow_core.transforms.decode_masks import decode_masks, masks_at_decode
from tests.unit.test_decode_masks import SALT, apply, compiled

# Text a mask must count in characters, not bytes: accents, CJK, emoji, combining marks.
TEXTS = [
    "ann@example.com",
    "",
    "a",
    "ab",
    "héllo wörld",
    "日本語テキスト",
    "😀😃😄😁x",
    "e\u0301\u0301z",
    "+41 79 123 45 67",
    "x" * 300,
    None,
]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.mark.slow
def test_arrow_masks_give_what_the_spark_masks_give(spark: SparkSession) -> None:
    from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
    from tableflow_core.pipeline.transforms.spark import apply_transforms

    schema = pa.schema([("c", pa.string())])
    variants: list[dict[str, Any]] = [
        {"method": "hash", "salt": SALT},
        {"method": "redact", "replacement": "[gone]"},
        {"method": "partial", "keep_first": 2, "keep_last": 3},
        {"method": "partial", "keep_first": 0, "keep_last": 1},
        {"method": "partial", "keep_first": 4, "keep_last": 0},
    ]
    rows = [
        {"c": text, SOURCE_PARTITION_COLUMN: 0, SOURCE_OFFSET_COLUMN: offset}
        for offset, text in enumerate(TEXTS)
    ]
    source = spark.createDataFrame(
        rows, f"c string, {SOURCE_PARTITION_COLUMN} int, {SOURCE_OFFSET_COLUMN} long"
    )
    for variant in variants:
        chain = compiled([{"type": "mask", "columns": ["c"], **variant}], schema)
        by_spark = {
            r[SOURCE_OFFSET_COLUMN]: r["c"]
            for r in apply_transforms(source, chain, spark=spark).df.collect()
        }
        by_arrow = apply(list(decode_masks(masks_at_decode(chain)).masks), TEXTS)
        assert [by_spark[i] for i in range(len(TEXTS))] == by_arrow, variant
