"""Row-local checks judged on Arrow batches, in the read tasks of a shared job (pure).

A checked append table whose checks each look at one row (`not_null`, `accepted_values`,
`range`) or at the batch's size (`row_count`) needs no Spark pipeline of its own: the
read tasks that decode its records judge each decoded batch here, count each check's
failing rows, keep a few samples, and take out the rows of failing skip/dlq checks with
their original records at hand (`pipeline/shared_tasks.py`). The driver adds the tasks'
counts up and judges every check as Spark's aggregate is judged (`checks/verdict.py`).

The predicates mean what the Spark SQL predicates of `checks/compile.py` mean, NULL
never judged except by `not_null`:

- `not_null`: NULL (a floating-point NaN is a value, as in Spark);
- `accepted_values`: a value not in the list, only where Spark compares the column with
  the list's literals by plain equality: strings with strings, integers with integers,
  booleans with booleans, floating-point numbers with finite numbers;
- `range`: a number below `min` or above `max`. Integers are compared with the bounds
  rounded inward (exact for every 64-bit value, as Spark's decimal comparison is);
  floating-point numbers as doubles, NaN above every number as Spark orders it, so NaN
  fails a `max` and passes a `min`.

Any other check, column type or value list keeps the table's checks on Spark
(`read_task_refusal` says why, and `plan` shows it).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tableflow_core.checks.compile import CompiledCheck

READ_TASK_KINDS = frozenset({"not_null", "accepted_values", "range", "row_count"})
ENGINE = "arrow"  # the checks report's `engine` (run_results.json): judged by read tasks
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _value_kind(data_type: pa.DataType) -> str | None:
    """How `accepted_values` and `range` compare a column of this type (None: not here)."""
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return "string"
    if pa.types.is_boolean(data_type):
        return "boolean"
    if pa.types.is_integer(data_type) and not pa.types.is_uint64(data_type):
        return "integer"  # compared as int64 (a uint64 may not fit)
    if pa.types.is_floating(data_type):
        return "floating"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_VALUES_FIT: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: (
        isinstance(v, int) and not isinstance(v, bool) and _INT64_MIN <= v <= _INT64_MAX
    ),
    "floating": lambda v: _is_number(v) and math.isfinite(v),
}


def _column_type(check: CompiledCheck, schema: pa.Schema) -> pa.DataType:
    return schema.field(check.columns[0]).type


def _accepted_values_refusal(check: CompiledCheck, schema: pa.Schema) -> str | None:
    data_type = _column_type(check, schema)
    kind = _value_kind(data_type)
    if kind is None:
        return f"a column of type {data_type} is compared by Spark"
    if not all(_VALUES_FIT[kind](v) for v in check.values):
        return f"values of other types than the {kind} column are compared by Spark"
    return None


def _range_refusal(check: CompiledCheck, schema: pa.Schema) -> str | None:
    data_type = _column_type(check, schema)
    if _value_kind(data_type) not in ("integer", "floating"):
        return f"a column of type {data_type} is compared by Spark"
    if any(b is not None and not math.isfinite(b) for b in (check.min, check.max)):
        return "a bound that is not a finite number is compared by Spark"
    return None


_REFUSALS: dict[str, Callable[[CompiledCheck, pa.Schema], str | None]] = {
    "not_null": lambda check, schema: None,
    "row_count": lambda check, schema: None,
    "accepted_values": _accepted_values_refusal,
    "range": _range_refusal,
}


def read_task_refusal(checks: Sequence[CompiledCheck], schema: pa.Schema) -> str | None:
    """Why the read tasks cannot judge `checks` on batches of `schema` (None: they can)."""
    for check in checks:
        if check.kind not in READ_TASK_KINDS:
            return f"check {check.name}: {check.kind} checks run on Spark"
        problem = _REFUSALS[check.kind](check, schema)
        if problem is not None:
            return f"check {check.name}: {problem}"
    return None


def _not_null(check: CompiledCheck, column: pa.Array) -> pa.Array:
    return pc.is_null(column)


def _accepted_values(check: CompiledCheck, column: pa.Array) -> pa.Array:
    kind = _value_kind(column.type)
    if kind == "integer":
        column, values = pc.cast(column, pa.int64()), pa.array(check.values, pa.int64())
    elif kind == "floating":
        values = pa.array([float(v) for v in check.values], pa.float64())
        column = pc.cast(column, pa.float64())
    else:
        values = pa.array(check.values, column.type)
    return pc.and_(pc.is_valid(column), pc.invert(pc.is_in(column, value_set=values)))


def _integer_range(check: CompiledCheck, column: pa.Array) -> list[pa.Array]:
    values = pc.cast(column, pa.int64())
    outside = []
    if check.min is not None:
        low = math.ceil(check.min)
        if low > _INT64_MAX:
            outside.append(pc.is_valid(values))
        elif low > _INT64_MIN:
            outside.append(pc.less(values, pa.scalar(low, pa.int64())))
    if check.max is not None:
        high = math.floor(check.max)
        if high < _INT64_MIN:
            outside.append(pc.is_valid(values))
        elif high < _INT64_MAX:
            outside.append(pc.greater(values, pa.scalar(high, pa.int64())))
    return outside


def _floating_range(check: CompiledCheck, column: pa.Array) -> list[pa.Array]:
    values = pc.cast(column, pa.float64())
    outside = []
    if check.min is not None:
        outside.append(pc.less(values, pa.scalar(float(check.min), pa.float64())))
    if check.max is not None:
        above = pc.greater(values, pa.scalar(float(check.max), pa.float64()))
        outside.append(pc.or_(above, pc.is_nan(values)))
    return outside


def _range(check: CompiledCheck, column: pa.Array) -> pa.Array:
    ranged = _integer_range if pa.types.is_integer(column.type) else _floating_range
    outside = ranged(check, column)
    if not outside:  # bounds beyond every value of the type: nothing falls outside
        return pa.repeat(False, len(column))
    return pc.and_(pc.is_valid(column), functools.reduce(pc.or_, outside))


_FAILING: dict[str, Callable[[CompiledCheck, pa.Array], pa.Array]] = {
    "not_null": _not_null,
    "accepted_values": _accepted_values,
    "range": _range,
}


def failing_rows(check: CompiledCheck, batch: pa.RecordBatch) -> pa.Array:
    """The rows of `batch` failing the row-level `check` (a boolean array without nulls)."""
    column = batch.column(check.columns[0])
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return pc.fill_null(_FAILING[check.kind](check, column), False)


@dataclass
class CheckTally:
    """What the read tasks found in the rows they judged: the rows, each check's failing
    rows (by the check's index) and a few of them as samples. Tallies add up."""

    rows: int = 0
    failing: dict[int, int] = field(default_factory=dict)
    samples: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    seconds: float = 0.0  # judging, in the tasks

    def add(self, other: CheckTally, sample_size: int) -> None:
        self.rows += other.rows
        self.seconds += other.seconds
        for index, count in other.failing.items():
            self.failing[index] = self.failing.get(index, 0) + count
        for index, rows in other.samples.items():
            self.samples[index] = _first(self.samples.get(index, []) + rows, sample_size)


def _first(samples: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """The `size` samples first on the topic (by partition and offset)."""
    ordered = sorted(
        samples, key=lambda s: (s.get("kafka_partition") or 0, s.get("kafka_offset") or 0)
    )
    return ordered[:size]


@dataclass(frozen=True)
class BatchVerdict:
    """One batch judged: its tally, and the rows its failing skip/dlq checks take out
    (dead-lettering wins), with the check that takes each dead-lettered row."""

    tally: CheckTally
    dead_lettered: pa.Array  # boolean, per row
    skipped: pa.Array  # boolean, per row
    reasons: pa.Array  # the name of the check taking each row out (null: none)


def judge_batch(
    checks: Sequence[CompiledCheck],
    batch: pa.RecordBatch,
    sample_columns: Callable[[pa.RecordBatch], list[dict[str, Any]]],
    sample_size: int,
) -> BatchVerdict:
    """`batch` (the decoded good rows) judged by every row-level check of `checks`.
    `sample_columns` turns failing rows into samples (what a sample shows)."""
    tally = CheckTally(rows=batch.num_rows)
    masks: dict[int, pa.Array] = {}
    for index, check in enumerate(checks):
        if check.kind == "row_count":
            continue
        mask = failing_rows(check, batch)
        count = pc.sum(mask).as_py() or 0
        tally.failing[index] = count
        if count:
            masks[index] = mask
            tally.samples[index] = sample_columns(batch.filter(mask).slice(0, sample_size))
    # The first splitting check, dlq ones before skip ones, names the row's way out.
    order = sorted(
        (i for i in masks if checks[i].splits_rows), key=lambda i: checks[i].on_failure != "dlq"
    )
    policy = pa.nulls(batch.num_rows, pa.string())
    reasons = pa.nulls(batch.num_rows, pa.string())
    for index in reversed(order):
        policy = pc.if_else(masks[index], pa.scalar(checks[index].on_failure), policy)
        reasons = pc.if_else(masks[index], pa.scalar(checks[index].name), reasons)
    return BatchVerdict(
        tally,
        pc.fill_null(pc.equal(policy, "dlq"), False),
        pc.fill_null(pc.equal(policy, "skip"), False),
        reasons,
    )
