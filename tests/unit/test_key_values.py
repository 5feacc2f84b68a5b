"""Upsert key rows fitted to the key columns' types (pure: no Spark, no broker)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pyarrow as pa
import pytest

from tableflow_core.pipeline.key_values import key_row_fitter
from tableflow_core.schemas.arrow_values import TemporalAs, storage_schema
from tableflow_core.schemas.payloads import PayloadError

TARGET = pa.schema(
    [("id", pa.int64()), ("n", pa.int32()), ("s", pa.string()), ("x", pa.float64()),
     ("d", pa.date32()), ("m", pa.decimal128(5, 2)), ("b", pa.binary()),
     ("ts", pa.timestamp("us", tz="UTC"))]
)  # fmt: skip
STORAGE = storage_schema(TARGET, {"d": TemporalAs.TEXT})
FIT = key_row_fitter(STORAGE, TARGET)
GOOD = {"id": 1, "n": 2, "s": "a", "x": 1.5, "d": "2026-11-22", "m": Decimal("123.45"),
        "b": b"k", "ts": 1_700_000_000_000_000}  # fmt: skip


def test_values_that_fit_pass_and_text_numbers_are_converted() -> None:
    assert FIT(GOOD) == GOOD
    converted = FIT({**GOOD, "id": "-42", "n": "+7", "s": 12, "x": "2.5", "m": "-1.5"})
    assert converted == {**GOOD, "id": -42, "n": 7, "s": "12", "x": 2.5, "m": Decimal("-1.5")}
    # the checked rows build the batch the decoder builds, with the table's types
    batch = pa.RecordBatch.from_pylist([converted], schema=STORAGE).cast(TARGET)
    assert batch.column("d").to_pylist() == [date(2026, 11, 22)]
    assert batch.column("m").to_pylist() == [Decimal("-1.50")]


@pytest.mark.parametrize(
    "column, value, why",
    [
        ("id", "x9", "not an integer"),
        ("id", " 7", "not an integer"),
        ("id", 2**63, "out of the column's range"),
        ("n", "3000000000", "out of the column's range"),
        ("id", True, "not an integer"),
        ("s", b"raw", "not text"),
        ("x", "abc", "could not convert"),
        ("d", "2026-13-45", ""),
        ("m", Decimal("1234.5"), "does not fit decimal128(5, 2)"),
        ("m", Decimal("1.234"), "does not fit decimal128(5, 2)"),
        ("m", "abc", "key value 'abc'"),
        ("b", "text", "not bytes"),
        ("ts", 2**63, "out of the column's range"),
    ],
)
def test_a_value_that_does_not_fit_is_a_payload_error_naming_it(
    column: str, value: object, why: str
) -> None:
    with pytest.raises(PayloadError) as raised:
        FIT({**GOOD, column: value})
    assert f"key value {value!r} does not fit key column {column!r}" in raised.value.reason
    assert why in raised.value.reason
