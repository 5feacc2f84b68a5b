"""Transforms compiled without Spark: validated steps and the schema they produce.

`compile_transforms` is what `plan` runs: every column a transform names is resolved
against the schema at that point of the chain, every expression is parsed and its
columns resolved by sqlglot, derived columns are typed, and each step can describe
itself in one line. Mistakes become one ConfigError naming file:line of each.
`tableflow_core.pipeline.transforms.spark` runs the compiled steps on a DataFrame.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

import pyarrow as pa
from pydantic import Field, SecretStr
from pydantic.dataclasses import dataclass

from tableflow_core.config.errors import ConfigError, ConfigProblem
from tableflow_core.config.models.base import IDENTIFIER
from tableflow_core.config.models.transforms import (
    DedupTransform,
    DeriveTransform,
    DropTransform,
    FilterTransform,
    MaskTransform,
    RenameTransform,
)
from tableflow_core.errors import TableflowError
from tableflow_core.schemas.arrow_json import ArrowSchema, ArrowType
from tableflow_core.transforms.arrow_masks import MaskMethod
from tableflow_core.transforms.locations import Locator, problem_at
from tableflow_core.transforms.sql import (
    HIDDEN_PREFIX,
    CastCheck,
    ExpressionError,
    cast_operand,
    check_references,
    checked_casts,
    infer_arrow_type,
    parse_expression,
    resolve_column,
    spark_type,
    unknown_column_message,
)


@dataclass(frozen=True)
class MaskStep:
    key: str
    columns: tuple[str, ...]
    method: MaskMethod
    replacement: str
    keep_first: int
    keep_last: int
    # The salt is a secret: never in a plan file or `plan --json` (`salted` says there is
    # one); apply takes it from the project's config (runner/binding.py).
    salt: SecretStr | None = Field(default=None, exclude=True)
    salted: bool = False
    kind: Literal["mask"] = "mask"

    def describe(self) -> str:
        how = {
            "hash": "hash (salted SHA-256 hex)",
            "redact": f"redact with {self.replacement!r}",
            "partial": f"partial (keep first {self.keep_first}, last {self.keep_last})",
        }[self.method]
        return f"mask {', '.join(self.columns)}: {how}"


@dataclass(frozen=True)
class DedupStep:
    key: str
    keys: tuple[str, ...]
    keep: Literal["first", "last"]
    kind: Literal["dedup"] = "dedup"

    def describe(self) -> str:
        return f"dedup on {', '.join(self.keys)}: keep {self.keep} by Kafka offset"


@dataclass(frozen=True)
class FilterStep:
    key: str
    where: str
    # A plain CAST in `where` that fails on a row rejects it (not filtered out unnoticed).
    cast_checks: tuple[CastCheck, ...] = ()
    kind: Literal["filter"] = "filter"

    def describe(self) -> str:
        return f"filter where {self.where}"


@dataclass(frozen=True)
class DeriveStep:
    key: str
    column: str
    expression: str
    # What Spark evaluates before casting to the planned type: the expression, or the
    # operand of its outermost CAST, so a value that CAST would turn into NULL is caught.
    value_expression: str
    arrow_type: ArrowType
    spark_type: str
    replaces: bool
    # The plain CASTs inside `value_expression`: a row where one fails is rejected too,
    # never written with the NULL Spark's non-ANSI CAST gives.
    cast_checks: tuple[CastCheck, ...] = ()
    kind: Literal["derive"] = "derive"

    def describe(self) -> str:
        verb = "replace" if self.replaces else "derive"
        return f"{verb} {self.column} {self.spark_type} = {self.expression}"


@dataclass(frozen=True)
class RenameStep:
    key: str
    renames: tuple[tuple[str, str], ...]
    kind: Literal["rename"] = "rename"

    def describe(self) -> str:
        return "rename " + ", ".join(f"{old} -> {new}" for old, new in self.renames)


@dataclass(frozen=True)
class DropStep:
    key: str
    columns: tuple[str, ...]
    kind: Literal["drop"] = "drop"

    def describe(self) -> str:
        return f"drop {', '.join(self.columns)}"


TransformStep = MaskStep | DedupStep | FilterStep | DeriveStep | RenameStep | DropStep
# The identity of a column a derive adds (`CompiledTransforms.sensitive_columns`): no
# decoded column's name starts so (names starting `__tf_` are reserved).
DERIVED_IDENTITY = "__tf_derived_"
# A step as a field of a model: told apart by its `kind` (plan files, `plan --json`).
AnyStep = Annotated[TransformStep, Field(discriminator="kind")]


@dataclass(frozen=True)
class CompiledTransforms:
    """The validated chain: steps in order, and the table's schema before and after."""

    steps: tuple[AnyStep, ...]
    input_schema: ArrowSchema
    output_schema: ArrowSchema

    def describe(self) -> list[str]:
        return [step.describe() for step in self.steps]

    def without(self, done: Sequence[TransformStep]) -> CompiledTransforms:
        """The chain left to run once the steps `done` ran (masks run while decoding);
        its schemas are the whole chain's (those steps keep their columns' types)."""
        left = tuple(s for s in self.steps if not any(s is d for d in done))
        return CompiledTransforms(left, self.input_schema, self.output_schema)

    def sensitive_columns(self, step: TransformStep | None = None) -> frozenset[str]:
        """Columns whose values a mask of the chain hides from the table, named as they
        are just before `step` (None: as the chain's input, the decoded columns). A
        column keeps its identity through renames and a derive that replaces it in place;
        a mask anywhere in the chain makes the identity masked, before the mask and after
        it. Their values are never quoted in a message (a decode failure, a rejected
        row's reason, ...): docs/security.md."""
        names = {name: name for name in self.input_schema.names}  # name -> identity
        before: dict[int, dict[str, str]] = {}
        masked: set[str] = set()
        for index, current in enumerate(self.steps):
            before[id(current)] = dict(names)
            if isinstance(current, MaskStep):
                masked.update(names[c] for c in current.columns if c in names)
            elif isinstance(current, RenameStep):
                renamed = dict(current.renames)
                names = {renamed.get(n, n): ident for n, ident in names.items()}
            elif isinstance(current, DropStep):
                names = {n: i for n, i in names.items() if n not in current.columns}
            elif isinstance(current, DeriveStep) and not current.replaces:
                names[current.column] = f"{DERIVED_IDENTITY}{index}"
        seen = (
            before.get(id(step), names)
            if step is not None
            else {n: n for n in self.input_schema.names}
        )
        return frozenset(name for name, identity in seen.items() if identity in masked)

    @property
    def dedup_keys(self) -> tuple[str, ...] | None:
        """Keys of the last dedup step, named as in the output (for dedup against the table)."""
        dedups = [s for s in self.steps if isinstance(s, DedupStep)]
        if not dedups:
            return None
        keys = list(dedups[-1].keys)
        after = self.steps[self.steps.index(dedups[-1]) + 1 :]
        for step in after:
            if isinstance(step, RenameStep):
                mapping = dict(step.renames)
                keys = [mapping.get(k, k) for k in keys]
        present = [k for k in keys if k in self.output_schema.names]
        return tuple(present) if len(present) == len(keys) else None


class StepError(TableflowError, ValueError):
    """One transform cannot be compiled; `subkey` narrows the location ("where")."""

    def __init__(self, message: str, subkey: str = "") -> None:
        super().__init__(message)
        self.subkey = subkey


def parse_checked(text: str, schema: pa.Schema, what: str, subkey: str) -> Any:
    """`text` parsed as a Spark SQL expression whose columns all exist in `schema`."""
    try:
        expression = parse_expression(text, what=what)
        check_references(expression, schema, what)
    except ExpressionError as exc:
        raise StepError(str(exc), subkey) from None
    return expression


def parse_predicate(text: str, schema: pa.Schema, what: str, subkey: str) -> Any:
    """Like parse_checked, and refused unless it is (or may be) a boolean predicate."""
    expression = parse_checked(text, schema, what, subkey)
    inferred = infer_arrow_type(expression, schema)
    if inferred is not None and not pa.types.is_boolean(inferred):
        raise StepError(
            f"{what} must be a boolean predicate; {text!r} is {spark_type(inferred)}", subkey
        )
    return expression


# ---------------------------------------------------------------- per transform


def resolve_columns(
    names: Sequence[str],
    schema: pa.Schema,
    what: str,
    subkey: str,
    *,
    keyed: bool = False,
    single: bool = False,
) -> list[str]:
    """Schema spellings of `names`, or a StepError located at the list item (or at the
    mapping key when `keyed`, at `subkey` itself when `single`)."""
    resolved = []
    for index, name in enumerate(names):
        actual = resolve_column(name, schema) if not name.startswith(HIDDEN_PREFIX) else None
        if actual is None:
            where = subkey if single else f"{subkey}.{name}" if keyed else f"{subkey}[{index}]"
            raise StepError(unknown_column_message(name, schema, what), where)
        resolved.append(actual)
    return resolved


def _replace_type(schema: pa.Schema, name: str, data_type: pa.DataType) -> pa.Schema:
    index = schema.get_field_index(name)
    return schema.set(index, schema.field(index).with_type(data_type))


def _is_nested(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_nested(data_type))


def _mask(t: MaskTransform, schema: pa.Schema, key: str) -> tuple[MaskStep, pa.Schema]:
    columns = resolve_columns(t.columns, schema, "mask", "columns")
    for index, column in enumerate(columns):
        if _is_nested(schema.field(column).type):
            raise StepError(
                f"mask: column {column!r} is {spark_type(schema.field(column).type)}; masks apply to "
                "primitive columns (derive the nested field into a column, then mask it)",
                f"columns[{index}]",
            )
    for column in columns:
        schema = _replace_type(schema, column, pa.string())
    step = MaskStep(
        key=key,
        columns=tuple(columns),
        method=t.method,
        replacement=t.replacement,
        keep_first=t.keep_first,
        keep_last=t.keep_last,
        salt=t.salt,
        salted=t.salt is not None,
    )
    return step, schema


def _dedup(t: DedupTransform, schema: pa.Schema, key: str) -> tuple[DedupStep, pa.Schema]:
    keys = resolve_columns(t.keys, schema, "dedup keys", "keys")
    for index, name in enumerate(keys):
        if pa.types.is_map(schema.field(name).type):
            raise StepError(
                f"dedup: key {name!r} is a map, which cannot be compared", f"keys[{index}]"
            )
    return DedupStep(key=key, keys=tuple(keys), keep=t.keep), schema


def _filter(t: FilterTransform, schema: pa.Schema, key: str) -> tuple[FilterStep, pa.Schema]:
    expression = parse_predicate(t.where, schema, "filter where", "where")
    try:
        cast_checks = checked_casts(expression, schema, "filter where")
    except ExpressionError as exc:
        raise StepError(str(exc), "where") from None
    return FilterStep(key=key, where=t.where, cast_checks=tuple(cast_checks)), schema


def _derive(t: DeriveTransform, schema: pa.Schema, key: str) -> tuple[DeriveStep, pa.Schema]:
    if t.column.startswith(HIDDEN_PREFIX):
        raise StepError(f"derive: column names starting {HIDDEN_PREFIX!r} are reserved", "column")
    what = f"derive {t.column}"
    expression = parse_checked(t.expression, schema, what, "expression")
    inferred = infer_arrow_type(expression, schema)
    if inferred is None:
        raise StepError(
            f"{what}: cannot infer the type of {t.expression!r}; give it one with "
            f"CAST(... AS <type>), e.g. CAST({t.expression} AS STRING)",
            "expression",
        )
    outer_operand = cast_operand(expression)
    value = expression.this if outer_operand is not None else expression
    try:
        cast_checks = checked_casts(value, schema, what)
    except ExpressionError as exc:
        raise StepError(str(exc), "expression") from None
    existing = resolve_column(t.column, schema)
    step = DeriveStep(
        key=key,
        column=existing or t.column,
        expression=t.expression,
        value_expression=outer_operand or t.expression,
        arrow_type=inferred,
        spark_type=spark_type(inferred),
        replaces=existing is not None,
        cast_checks=tuple(cast_checks),
    )
    if existing is not None:
        index = schema.get_field_index(existing)
        return step, schema.set(index, pa.field(existing, inferred))
    return step, schema.append(pa.field(t.column, inferred))


def _rename(t: RenameTransform, schema: pa.Schema, key: str) -> tuple[RenameStep, pa.Schema]:
    olds = resolve_columns(list(t.columns), schema, "rename", "columns", keyed=True)
    renames = list(zip(olds, t.columns.values(), strict=True))
    remaining = {n.lower() for n in schema.names} - {o.lower() for o in olds}
    for (old, new), written in zip(renames, t.columns, strict=True):
        where = f"columns.{written}"
        if not re.match(IDENTIFIER, new) or new.startswith(HIDDEN_PREFIX):
            raise StepError(f"rename: {new!r} is not a valid column name", where)
        if new.lower() in remaining:
            raise StepError(f"rename: {old!r} -> {new!r} collides with an existing column", where)
        remaining.add(new.lower())
    mapping = dict(renames)
    renamed = pa.schema([f.with_name(mapping.get(f.name, f.name)) for f in schema])
    return RenameStep(key=key, renames=tuple(renames)), renamed


def _drop(t: DropTransform, schema: pa.Schema, key: str) -> tuple[DropStep, pa.Schema]:
    columns = resolve_columns(t.columns, schema, "drop", "columns")
    kept = pa.schema([f for f in schema if f.name not in columns])
    if len(kept) == 0:
        raise StepError("drop: a table needs at least one column", "columns")
    return DropStep(key=key, columns=tuple(columns)), kept


_COMPILERS: dict[type, Callable[[Any, pa.Schema, str], tuple[TransformStep, pa.Schema]]] = {
    MaskTransform: _mask,
    DedupTransform: _dedup,
    FilterTransform: _filter,
    DeriveTransform: _derive,
    RenameTransform: _rename,
    DropTransform: _drop,
}


def compile_transforms(
    transforms: Sequence[Any],
    input_schema: pa.Schema,
    locate: Locator,
    *,
    section: str = "transforms",
) -> CompiledTransforms:
    """Validate `transforms` (config models, in order) over `input_schema`.

    Raises ConfigError listing every transform that cannot run, each at its file:line
    (a failing step leaves the schema as it was, so later steps are still checked).
    """
    problems: list[ConfigProblem] = []
    steps: list[TransformStep] = []
    schema = input_schema
    for index, transform in enumerate(transforms):
        key = f"{section}[{index}]"
        try:
            step, schema = _COMPILERS[type(transform)](transform, schema, key)
        except StepError as exc:
            subkey = f"{key}.{exc.subkey}" if exc.subkey else key
            problems.append(problem_at(locate, subkey, str(exc)))
            continue
        steps.append(step)
    if problems:
        raise ConfigError(problems)
    return CompiledTransforms(steps=tuple(steps), input_schema=input_schema, output_schema=schema)
