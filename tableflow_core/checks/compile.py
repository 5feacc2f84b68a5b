"""Data-quality checks compiled without Spark (what `plan` runs).

Each check is validated against the schema after the transforms (columns exist,
expressions parse and read known columns, bounds make sense, `on_failure` fits the
check) and becomes one or more `CompiledCheck`s: a `not_null` over three columns is
three checks, so each column gets its own result. A row-level check also carries the
Spark SQL predicate that selects its failing rows (used for samples and to split
rows off for `on_failure: skip|dlq`) and its 0/1 flag, whose sum is its failing count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
from pydantic.dataclasses import dataclass as data_model
from sqlglot import exp

from tableflow_core.config.errors import ConfigError, ConfigProblem
from tableflow_core.config.models.checks import (
    AcceptedValuesCheck,
    ExpressionCheck,
    NotNullCheck,
    RangeCheck,
    RowCountCheck,
    UniqueCheck,
)
from tableflow_core.transforms.compile import StepError, parse_predicate, resolve_columns
from tableflow_core.transforms.locations import Locator, problem_at
from tableflow_core.transforms.sql import (
    DIALECT,
    spark_type,
)

CheckKind = Literal["not_null", "unique", "accepted_values", "range", "expression", "row_count"]
OnFailure = Literal["fail", "skip", "dlq"]


@data_model(frozen=True)
class CompiledCheck:
    """One expectation: what it checks, how bad a failure is, what happens to failing rows."""

    key: str
    kind: CheckKind
    name: str
    severity: Literal["error", "warn"]
    on_failure: OnFailure
    columns: tuple[str, ...] = ()
    values: tuple[str | int | float | bool, ...] = ()
    min: float | None = None
    max: float | None = None
    expression: str | None = None
    # Spark SQL selecting failing rows (None: batch-level, or unique, which needs a window).
    failing_rows: str | None = None

    @property
    def splits_rows(self) -> bool:
        """Failing rows are taken out of the batch (skipped or dead-lettered)."""
        return self.severity == "error" and self.on_failure in ("skip", "dlq")

    def describe(self) -> str:
        then = (
            "warn"
            if self.severity == "warn"
            else {
                "fail": "fail the run",
                "skip": "skip failing rows",
                "dlq": "dead-letter failing rows",
            }[self.on_failure]
        )
        return f"check {self.name} ({self.severity}: {then})"


@data_model(frozen=True)
class CompiledChecks:
    checks: tuple[CompiledCheck, ...]

    def describe(self) -> list[str]:
        return [check.describe() for check in self.checks]

    @property
    def judge_empty_batch(self) -> bool:
        """A run with no new records still has a verdict: a `row_count` check with a
        minimum above 0 fails (or warns) on its empty batch (docs/transforms-and-checks.md)."""
        return any(c.kind == "row_count" and (c.min or 0) > 0 for c in self.checks)


def _quote(name: str) -> str:
    return f"`{name}`"


def _literal(value: str | int | float | bool) -> str:
    return str(exp.convert(value).sql(dialect=DIALECT))


@dataclass(frozen=True)
class _Base:
    key: str
    severity: Literal["error", "warn"]
    on_failure: OnFailure

    def make(self, kind: CheckKind, name: str, **fields: Any) -> CompiledCheck:
        return CompiledCheck(
            key=self.key,
            kind=kind,
            name=name,
            severity=self.severity,
            on_failure=self.on_failure,
            **fields,
        )


def _not_null(c: NotNullCheck, schema: pa.Schema, base: _Base) -> list[CompiledCheck]:
    columns = resolve_columns(c.columns, schema, "not_null", "columns")
    return [
        base.make(
            "not_null", f"not_null({col})", columns=(col,), failing_rows=f"{_quote(col)} IS NULL"
        )
        for col in columns
    ]


def _unique(c: UniqueCheck, schema: pa.Schema, base: _Base) -> list[CompiledCheck]:
    columns = resolve_columns(c.columns, schema, "unique", "columns")
    for col in columns:
        if pa.types.is_map(schema.field(col).type):
            raise StepError(f"unique: column {col!r} is a map, which cannot be compared", "columns")
    return [base.make("unique", f"unique({', '.join(columns)})", columns=tuple(columns))]


def _accepted_values(c: AcceptedValuesCheck, schema: pa.Schema, base: _Base) -> list[CompiledCheck]:
    (col,) = resolve_columns([c.column], schema, "accepted_values", "column", single=True)
    column_type = schema.field(col).type
    if pa.types.is_nested(column_type):
        raise StepError(f"accepted_values: column {col!r} is {spark_type(column_type)}", "column")
    listed = ", ".join(_literal(v) for v in c.values)
    # Like great-expectations: NULL is not judged here (use not_null for that).
    predicate = f"{_quote(col)} IS NOT NULL AND NOT ({_quote(col)} IN ({listed}))"
    return [
        base.make(
            "accepted_values",
            f"accepted_values({col})",
            columns=(col,),
            values=tuple(c.values),
            failing_rows=predicate,
        )
    ]


def _is_orderable_number(data_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(data_type)
        or pa.types.is_floating(data_type)
        or pa.types.is_decimal(data_type)
    )


def _range(c: RangeCheck, schema: pa.Schema, base: _Base) -> list[CompiledCheck]:
    (col,) = resolve_columns([c.column], schema, "range", "column", single=True)
    if c.min is None and c.max is None:
        raise StepError("range needs min, max or both")
    if c.min is not None and c.max is not None and c.min > c.max:
        raise StepError(f"range: min {c.min} is greater than max {c.max}")
    column_type = schema.field(col).type
    if not _is_orderable_number(column_type):
        raise StepError(
            f"range: column {col!r} is {spark_type(column_type)}; range checks numbers "
            "(use an expression check for dates and strings)",
            "column",
        )
    bounds = []
    if c.min is not None:
        bounds.append(f"{_quote(col)} < {_literal(c.min)}")
    if c.max is not None:
        bounds.append(f"{_quote(col)} > {_literal(c.max)}")
    predicate = f"{_quote(col)} IS NOT NULL AND ({' OR '.join(bounds)})"
    return [
        base.make(
            "range", f"range({col})", columns=(col,), min=c.min, max=c.max, failing_rows=predicate
        )
    ]


def _expression(c: ExpressionCheck, schema: pa.Schema, base: _Base) -> list[CompiledCheck]:
    what = f"expression check {c.name}"
    parse_predicate(c.expression, schema, what, "expression")
    # Every row must satisfy it: NULL counts as a failure.
    predicate = f"NOT coalesce(({c.expression}), false)"
    return [base.make("expression", c.name, expression=c.expression, failing_rows=predicate)]


def _row_count(c: RowCountCheck, schema: pa.Schema, base: _Base) -> list[CompiledCheck]:
    if c.min is None and c.max is None:
        raise StepError("row_count needs min, max or both")
    if c.min is not None and c.max is not None and c.min > c.max:
        raise StepError(f"row_count: min {c.min} is greater than max {c.max}")
    if c.on_failure in ("skip", "dlq"):
        raise StepError(
            f"row_count checks the whole batch: on_failure {c.on_failure} has no rows to "
            "route (use severity warn or on_failure fail)",
            "on_failure",
        )
    fail_only = _Base(key=base.key, severity=base.severity, on_failure="fail")
    return [fail_only.make("row_count", "row_count", min=c.min, max=c.max)]


_COMPILERS: dict[type, Callable[[Any, pa.Schema, _Base], list[CompiledCheck]]] = {
    NotNullCheck: _not_null,
    UniqueCheck: _unique,
    AcceptedValuesCheck: _accepted_values,
    RangeCheck: _range,
    ExpressionCheck: _expression,
    RowCountCheck: _row_count,
}


def compile_checks(
    checks: Sequence[Any],
    schema: pa.Schema,
    locate: Locator,
    *,
    default_on_failure: OnFailure = "fail",
    dead_letter_configured: bool = False,
    section: str = "checks",
) -> CompiledChecks:
    """Validate `checks` (config models) over `schema` (the table after its transforms).

    `default_on_failure` is the table's `on_error`. Raises one ConfigError listing every
    check that cannot run, each at its file:line.
    """
    problems: list[ConfigProblem] = []
    compiled: list[CompiledCheck] = []
    for index, check in enumerate(checks):
        key = f"{section}[{index}]"
        on_failure: OnFailure = check.on_failure or default_on_failure
        if on_failure == "dlq" and not dead_letter_configured and check.type != "row_count":
            subkey = f"{key}.on_failure" if check.on_failure else key
            problems.append(
                problem_at(
                    locate,
                    subkey,
                    f"check {check.type}: on_failure dlq needs the table's `dlq` target",
                )
            )
            continue
        base = _Base(key=key, severity=check.severity, on_failure=on_failure)
        try:
            compiled.extend(_COMPILERS[type(check)](check, schema, base))
        except StepError as exc:
            subkey = f"{key}.{exc.subkey}" if exc.subkey else key
            problems.append(problem_at(locate, subkey, str(exc)))
    names = [c.name for c in compiled]
    for index, check in enumerate(compiled):
        if check.name in names[:index]:
            problems.append(
                problem_at(locate, check.key, f"check {check.name!r} is declared twice")
            )
    if problems:
        raise ConfigError(problems)
    return CompiledChecks(checks=tuple(compiled))
