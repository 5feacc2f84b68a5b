"""Row-local checks judged on Arrow batches (checks/arrow_checks.py) against what Spark's
predicates (checks/compile.py) select, written out by hand for the cases where Arrow and
Spark SQL differ by default: NULL, NaN (Spark orders it above every number), integer
bounds that are not integers, 64-bit extremes. The same batches through Spark itself:
tests/integration/test_shared_checks.py. Which tables share a job with their checks
(ingest/sharing.py)."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pytest

from tableflow_core.checks.arrow_checks import (
    CheckTally,
    failing_rows,
    judge_batch,
    read_task_refusal,
)
from tableflow_core.checks.compile import CompiledCheck, CompiledChecks
from tableflow_core.config.models.dead_letter import IcebergDeadLetter, KafkaDeadLetter
from tableflow_core.ingest.compiled import CompiledTable
from tableflow_core.ingest.sharing import needs_spark_writer
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.ingest.stages import (
    Check,
    Decode,
    Publish,
    ReadRanges,
    RouteBadRecords,
    StepLine,
    Write,
)
from tableflow_core.transforms.compile import CompiledTransforms
from tests.unit.test_shared_jobs_plan import spec

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def check(kind: str, column: str = "x", **fields: Any) -> CompiledCheck:
    values = {"severity": "error", "on_failure": "fail", **fields}
    return CompiledCheck(
        key="checks[0]", kind=kind, name=f"{kind}({column})", columns=(column,), **values
    )  # type: ignore[arg-type]


def failing(found: CompiledCheck, values: list[Any], data_type: pa.DataType) -> list[bool]:
    batch = pa.record_batch({"x": pa.array(values, data_type)})
    result = failing_rows(found, batch)
    assert result.null_count == 0
    return [bool(v) for v in result.to_pylist()]


def test_not_null_fails_null_and_never_nan() -> None:
    found = failing(check("not_null"), [1.0, None, math.nan], pa.float64())
    assert found == [False, True, False]
    assert failing(check("not_null"), ["a", None], pa.string()) == [False, True]


def test_integer_range_compares_with_bounds_rounded_inward_exactly_at_64_bits() -> None:
    values = [0, 1, 94, 95, None, INT64_MIN, INT64_MAX]
    # Spark: x < 0.5 OR x > 94.0, as decimals: 0 fails, 1 passes, 95 fails.
    assert failing(check("range", min=0.5, max=94.0), values, pa.int64()) == [
        True, False, False, True, False, True, True,
    ]  # fmt: skip
    # 2**63 - 1 as a double is 2**63: no int64 is above it; 2**53 + 1 is above 2**53.
    assert failing(check("range", max=2.0**63), [INT64_MAX], pa.int64()) == [False]
    assert failing(check("range", max=2.0**53), [2**53 + 1, 2**53], pa.int64()) == [True, False]
    # Bounds past every int64: nothing, or everything (but NULL), falls outside.
    assert failing(check("range", min=-1e30, max=1e30), [INT64_MIN, INT64_MAX], pa.int64()) == [
        False, False,
    ]  # fmt: skip
    assert failing(check("range", min=1e30), [INT64_MAX, None], pa.int64()) == [True, False]
    assert failing(check("range", max=-1e30), [INT64_MIN], pa.int64()) == [True]
    assert failing(check("range", min=-3.5, max=-0.5), [-4, -3, -1, 0], pa.int8()) == [
        True, False, False, True,
    ]  # fmt: skip


def test_floating_range_orders_nan_above_every_number_as_spark_does() -> None:
    values = [94.0, 94.0000001, math.nan, None, -math.inf, math.inf, -0.0]
    assert failing(check("range", max=94.0), values, pa.float64()) == [
        False, True, True, False, False, True, False,
    ]  # fmt: skip
    assert failing(check("range", min=0.0), values, pa.float64()) == [
        False, False, False, False, True, False, False,
    ]  # fmt: skip
    # float32 values are widened to doubles, not the bound narrowed to a float32.
    assert failing(check("range", max=0.1), [0.1], pa.float32()) == [True]


def test_accepted_values_compare_like_types_and_never_judge_null() -> None:
    strings = check("accepted_values", values=("a", "b"))
    assert failing(strings, ["a", "c", None, "A"], pa.string()) == [False, True, False, True]
    big = check("accepted_values", values=(1, 2**40))
    assert failing(big, [1, 2, None], pa.int32()) == [False, True, False]
    numbers = check("accepted_values", values=(1, 2.5))
    assert failing(numbers, [1.0, 2.5, math.nan, None], pa.float64()) == [
        False, False, True, False,
    ]  # fmt: skip
    flags = check("accepted_values", values=(True,))
    assert failing(flags, [True, False, None], pa.bool_()) == [False, True, False]


@pytest.mark.parametrize(
    ("found", "data_type", "why"),
    [
        (check("unique"), pa.int64(), "unique checks run on Spark"),
        (check("expression", expression="x > 1"), pa.int64(), "expression checks run on Spark"),
        (check("range", max=1.0), pa.decimal128(10, 2), "compared by Spark"),
        (check("range", max=math.inf), pa.float64(), "not a finite number"),
        (check("accepted_values", values=(1,)), pa.string(), "other types"),
        (check("accepted_values", values=(True,)), pa.int64(), "other types"),
        (check("accepted_values", values=(1.5,)), pa.int64(), "other types"),
        (check("accepted_values", values=("2024-01-01",)), pa.date32(), "compared by Spark"),
        (check("range", max=1.0), pa.uint64(), "compared by Spark"),
        (check("accepted_values", values=(2**64,)), pa.int64(), "other types"),
    ],
)
def test_what_the_read_tasks_leave_to_spark(
    found: CompiledCheck, data_type: pa.DataType, why: str
) -> None:
    refusal = read_task_refusal([found], pa.schema([("x", data_type)]))
    assert refusal is not None and why in refusal and found.name in refusal


def test_row_local_checks_of_every_comparable_type_are_judged_by_the_read_tasks() -> None:
    schema = pa.schema([("x", pa.int32()), ("s", pa.string()), ("f", pa.float32())])
    found = [
        check("not_null"),
        check("range", min=0.0),
        check("accepted_values", "s", values=("a",)),
        check("range", "f", max=1.0),
        check("row_count", min=1),
    ]
    assert read_task_refusal(found, schema) is None


def test_a_batch_judged_counts_samples_and_routes_dead_lettering_before_skipping() -> None:
    checks = [
        check("range", "qty", max=94.0, on_failure="skip"),
        check("not_null", "name", on_failure="dlq"),
        check("accepted_values", "name", values=("a", "b"), severity="warn"),
        check("row_count", "qty", min=100),
    ]
    batch = pa.record_batch(
        {
            "qty": pa.array([1, 99, 99, 5, 3], pa.int64()),
            "name": pa.array(["a", None, "a", "z", None]),
        }
    )
    verdict = judge_batch(checks, batch, lambda rows: rows.to_pylist(), 1)
    assert verdict.tally.rows == 5
    assert verdict.tally.failing == {0: 2, 1: 2, 2: 1}
    assert verdict.tally.samples == {
        0: [{"qty": 99, "name": None}],
        1: [{"qty": 99, "name": None}],
        2: [{"qty": 5, "name": "z"}],
    }
    # Row 1 fails both the skip and the dlq check: dead-lettering wins. A warn check
    # takes nothing out.
    assert verdict.dead_lettered.to_pylist() == [False, True, False, False, True]
    assert verdict.skipped.to_pylist() == [False, False, True, False, False]
    assert verdict.reasons.to_pylist() == [
        None,
        "not_null(name)",
        "range(qty)",
        None,
        "not_null(name)",
    ]


def test_tallies_add_up_and_keep_the_samples_first_on_the_topic() -> None:
    first = CheckTally(2, {0: 1}, {0: [{"kafka_partition": 1, "kafka_offset": 7}]}, 0.5)
    second = CheckTally(
        3,
        {0: 2, 1: 1},
        {0: [{"kafka_partition": 0, "kafka_offset": 9}, {"kafka_partition": 1, "kafka_offset": 2}]},
        0.25,
    )
    first.add(second, 2)
    assert (first.rows, first.failing, first.seconds) == (5, {0: 3, 1: 1}, 0.75)
    assert first.samples[0] == [
        {"kafka_partition": 0, "kafka_offset": 9},
        {"kafka_partition": 1, "kafka_offset": 2},
    ]


# --------------------------------------------------------------- sharing with checks

SCHEMA = pa.schema([("id", pa.int64()), ("qty", pa.int64()), ("price", pa.decimal128(9, 2))])
ICEBERG = IcebergDeadLetter(type="iceberg", table="ops.bad_records")


def checked_spec(*checks: CompiledCheck, **overrides: Any) -> IngestSpec:
    fields: dict[str, Any] = {
        "decoded_schema": SCHEMA,
        "stages": (
            ReadRanges(),
            Decode(value_format="avro"),
            Check(checks=tuple(StepLine(kind=c.kind, text=c.name) for c in checks)),
            RouteBadRecords(on_error="dlq", dead_letter="iceberg table ops.bad_records"),
            Write(),
            Publish(),
        ),
        "dead_letter": ICEBERG,
        "compiled": CompiledTable(
            transforms=CompiledTransforms((), SCHEMA, SCHEMA),
            checks=CompiledChecks(checks=checks),
        ),
    }
    return spec(**{**fields, **overrides})


def test_an_append_table_with_row_local_checks_and_an_iceberg_dead_letter_table_shares() -> None:
    assert needs_spark_writer(checked_spec(check("range", "qty", max=94.0))) is None


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"dead_letter": KafkaDeadLetter(type="kafka", topic="bad")}, "dead-letter target"),
        ({"dead_letter_payload": "masked"}, "dead-letter target"),
        ({"mode": "upsert", "key_columns": ("id",)}, "upsert table's checks"),
    ],
)
def test_a_checked_table_keeps_its_own_job(overrides: dict[str, Any], why: str) -> None:
    found = needs_spark_writer(checked_spec(check("range", "qty", max=94.0), **overrides))
    assert found is not None and why in found


def test_a_check_the_read_tasks_cannot_judge_keeps_the_tables_own_job() -> None:
    found = needs_spark_writer(checked_spec(check("range", "price", max=9.0)))
    assert found is not None and "range(price)" in found
    unique = needs_spark_writer(checked_spec(check("unique", "id")))
    assert unique is not None and "unique" in unique
