"""Spark SQL expressions checked without Spark: parsed, resolved and typed by sqlglot.

`plan` must catch a typo in a filter or a derived column without starting a JVM, so
expressions are parsed with sqlglot's Spark dialect, their column references are
resolved against the table's Arrow schema (case-insensitively, as Spark does), and a
derived column's type is inferred by sqlglot's type annotation.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import sqlglot
from pydantic.dataclasses import dataclass
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from tableflow_core.errors import TableflowError

DIALECT = "spark"
# Columns the pipeline carries beside the table's (source partition and offset); users
# cannot reference or create them.
HIDDEN_PREFIX = "__tf_"
_INPUT = "__tf_input"
_VALUE = "__tf_value"


class ExpressionError(TableflowError, ValueError):
    """An expression cannot be used as written (the compiler adds the file:line)."""


def parse_expression(text: str, *, what: str) -> exp.Expr:
    """One row-level Spark SQL expression; `what` names it in messages ("filter where")."""
    try:
        parsed = sqlglot.parse(text, read=DIALECT)
    except ParseError as exc:
        raise ExpressionError(f"{what}: syntax error in {text!r}: {_parse_message(exc)}") from None
    except SqlglotError as exc:
        raise ExpressionError(f"{what}: cannot parse {text!r}: {exc}") from None
    statements = [p for p in parsed if p is not None]
    if len(statements) != 1:
        raise ExpressionError(f"{what}: expected one expression, got {len(statements)} in {text!r}")
    expression = statements[0]
    if isinstance(expression, exp.Query) or expression.find(exp.Query, exp.Subquery):
        raise ExpressionError(f"{what}: subqueries are not allowed in {text!r}")
    if expression.find(exp.AggFunc, exp.Window):
        raise ExpressionError(
            f"{what}: aggregate and window functions are not allowed in {text!r} "
            "(transforms and checks see one row at a time)"
        )
    return expression


def _parse_message(exc: ParseError) -> str:
    if not exc.errors:
        return str(exc)
    first = exc.errors[0]
    description = str(first.get("description") or exc)
    column = first.get("col")
    highlight = first.get("highlight")
    near = f" near {highlight!r}" if highlight else ""
    return f"{description}{near} (column {column})" if column else f"{description}{near}"


def resolve_column(name: str, schema: pa.Schema) -> str | None:
    """The schema's spelling of `name` (Spark resolves column names case-insensitively)."""
    if name in schema.names:
        return name
    folded = [n for n in schema.names if n.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None


def unknown_column_message(name: str, schema: pa.Schema, what: str) -> str:
    visible = [n for n in schema.names if not n.startswith(HIDDEN_PREFIX)]
    close = difflib.get_close_matches(name, visible, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{what}: unknown column {name!r}{hint}; columns here: {', '.join(visible)}"


def referenced_columns(expression: exp.Expr) -> list[str]:
    """Top-level column names an expression reads (`addr.city` reads `addr`)."""
    names: list[str] = []
    for column in expression.find_all(exp.Column):
        parts = column.parts
        root = parts[0].name if parts else column.name
        if root not in names:
            names.append(root)
    return names


def check_references(expression: exp.Expr, schema: pa.Schema, what: str) -> None:
    for name in referenced_columns(expression):
        if name.startswith(HIDDEN_PREFIX) or resolve_column(name, schema) is None:
            raise ExpressionError(unknown_column_message(name, schema, what))


def cast_operand(expression: exp.Expr) -> str | None:
    """The operand of an outermost plain CAST (not TRY_CAST), as Spark SQL; else None."""
    if isinstance(expression, exp.Cast) and not expression.args.get("safe"):
        return str(expression.this.sql(dialect=DIALECT))
    return None


def infer_arrow_type(expression: exp.Expr, schema: pa.Schema) -> pa.DataType | None:
    """The Arrow type of `expression` over rows of `schema`, or None if sqlglot cannot tell."""
    mapping: dict[str, object] = {
        _INPUT: {name: spark_type(schema.field(name).type) for name in schema.names}
    }
    query = exp.select(exp.alias_(expression.copy(), _VALUE)).from_(_INPUT)
    try:
        qualified = qualify(query, schema=mapping, dialect=DIALECT, validate_qualify_columns=False)
        annotated = annotate_types(qualified, schema=mapping, dialect=DIALECT)
    except SqlglotError:
        return None
    select = annotated.selects[0]
    data_type = select.type
    return arrow_type(data_type) if data_type is not None else None


# ----------------------------------------------------------------- type mapping

_PRIMITIVE_TO_SPARK: dict[pa.DataType, str] = {
    pa.bool_(): "BOOLEAN",
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.string(): "STRING",
    pa.large_string(): "STRING",
    pa.binary(): "BINARY",
    pa.large_binary(): "BINARY",
    pa.date32(): "DATE",
}


def spark_type(data_type: pa.DataType) -> str:
    """Arrow type -> Spark SQL type text (what the table column is in Spark)."""
    if data_type in _PRIMITIVE_TO_SPARK:
        return _PRIMITIVE_TO_SPARK[data_type]
    if pa.types.is_decimal(data_type):
        return f"DECIMAL({data_type.precision}, {data_type.scale})"
    if pa.types.is_timestamp(data_type):
        return "TIMESTAMP" if data_type.tz else "TIMESTAMP_NTZ"
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return f"ARRAY<{spark_type(data_type.value_type)}>"
    if pa.types.is_map(data_type):
        return f"MAP<{spark_type(data_type.key_type)}, {spark_type(data_type.item_type)}>"
    if pa.types.is_struct(data_type):
        inner = ", ".join(f"{f.name}: {spark_type(f.type)}" for f in data_type)
        return f"STRUCT<{inner}>"
    # Iceberg time/uuid/fixed arrive as Spark strings or binaries; none is typed further here.
    return "STRING" if pa.types.is_time(data_type) else "BINARY"


T = exp.DataType.Type
# Iceberg has no 8/16-bit integers: Spark writes them as int, so plan does too.
_SQL_TO_ARROW: dict[Any, pa.DataType] = {
    T.BOOLEAN: pa.bool_(),
    T.TINYINT: pa.int32(),
    T.SMALLINT: pa.int32(),
    T.INT: pa.int32(),
    T.BIGINT: pa.int64(),
    T.FLOAT: pa.float32(),
    T.DOUBLE: pa.float64(),
    T.VARCHAR: pa.string(),
    T.CHAR: pa.string(),
    T.TEXT: pa.string(),
    T.NVARCHAR: pa.string(),
    T.BINARY: pa.binary(),
    T.VARBINARY: pa.binary(),
    T.DATE: pa.date32(),
    T.TIMESTAMP: pa.timestamp("us", tz="UTC"),
    T.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
    T.TIMESTAMPLTZ: pa.timestamp("us", tz="UTC"),
    T.TIMESTAMPNTZ: pa.timestamp("us"),
    T.DATETIME: pa.timestamp("us"),
}


def _decimal(data_type: exp.DataType) -> pa.DataType | None:
    params = [p.this for p in data_type.expressions if isinstance(p, exp.DataTypeParam)]
    try:
        precision = int(params[0].name) if params else 10
        scale = int(params[1].name) if len(params) > 1 else 0
    except (ValueError, AttributeError):
        return None
    return pa.decimal128(precision, scale)


def _array(data_type: exp.DataType) -> pa.DataType | None:
    inner = data_type.expressions[0] if data_type.expressions else None
    item = arrow_type(inner) if isinstance(inner, exp.DataType) else None
    return pa.list_(item) if item is not None else None


def _map(data_type: exp.DataType) -> pa.DataType | None:
    types = [e for e in data_type.expressions if isinstance(e, exp.DataType)]
    if len(types) != 2:
        return None
    key, value = arrow_type(types[0]), arrow_type(types[1])
    return pa.map_(key, value) if key is not None and value is not None else None


def _struct(data_type: exp.DataType) -> pa.DataType | None:
    fields = []
    for member in data_type.expressions:
        if not isinstance(member, exp.ColumnDef) or not isinstance(member.kind, exp.DataType):
            return None
        member_type = arrow_type(member.kind)
        if member_type is None:
            return None
        fields.append(pa.field(member.name, member_type))
    return pa.struct(fields)


_NESTED: dict[Any, Callable[[exp.DataType], pa.DataType | None]] = {
    T.DECIMAL: _decimal,
    T.ARRAY: _array,
    T.MAP: _map,
    T.STRUCT: _struct,
}


def arrow_type(data_type: exp.DataType) -> pa.DataType | None:
    """sqlglot type -> Arrow type, None when unknown (NULL, UNKNOWN, unmapped)."""
    kind = data_type.this
    if kind in _SQL_TO_ARROW:
        return _SQL_TO_ARROW[kind]
    builder = _NESTED.get(kind)
    return builder(data_type) if builder is not None else None


def spark_type_of_sql(text: str) -> str:
    """Normalize a Spark type name for messages (`decimal(10,2)` -> `DECIMAL(10, 2)`)."""
    return exp.DataType.build(text, dialect=DIALECT).sql(DIALECT)


# ------------------------------------------------------------ casts that can fail

# Spark's function-style casts (`bigint(s)`) that sqlglot leaves as anonymous functions.
_CAST_FUNCTIONS = frozenset(
    {"boolean", "tinyint", "smallint", "int", "bigint", "float", "double", "decimal", "date",
     "timestamp", "string", "binary"}
)  # fmt: skip
_NEVER_FAILS = (T.TEXT, T.VARCHAR, T.CHAR, T.NVARCHAR)


@dataclass(frozen=True)
class CastCheck:
    """One plain CAST inside an expression, and when it failed on a row.

    `failed` is a Spark SQL predicate: the CAST was evaluated on this row (its branch of
    a CASE / IF / COALESCE / AND / OR was taken), its operand was not NULL, and the cast
    gave NULL (Spark's non-ANSI CAST turns a failure into NULL; TRY_CAST also catches an
    overflow that non-ANSI CAST would wrap).
    """

    cast: str
    operand: str
    failed: str


def _plain_cast(node: exp.Expr) -> tuple[exp.Expr, exp.DataType] | None:
    """(operand, target type) of a CAST that is not TRY_CAST, in either spelling."""
    if isinstance(node, exp.Cast) and not node.args.get("safe"):
        to = node.args.get("to")
        return (node.this, to) if isinstance(to, exp.DataType) else None
    if (
        isinstance(node, exp.Anonymous)
        and str(node.this).lower() in _CAST_FUNCTIONS
        and len(node.expressions) == 1
    ):
        return node.expressions[0], exp.DataType.build(str(node.this), dialect=DIALECT)
    return None


def _is_true(condition: exp.Expr) -> exp.Expr:
    return exp.func("COALESCE", exp.paren(condition.copy()), exp.false())


def _not_true(condition: exp.Expr) -> exp.Expr:
    return exp.not_(_is_true(condition))


def _is_null(value: exp.Expr) -> exp.Expr:
    return exp.Is(this=exp.paren(value.copy()), expression=exp.Null())


def _guarded_children(node: exp.Expr) -> list[tuple[exp.Expr, list[exp.Expr]]]:
    """The children of a short-circuiting node, each with the conditions under which
    Spark evaluates it; an empty list for other nodes (all children always evaluated)."""
    if isinstance(node, exp.Case):
        out: list[tuple[exp.Expr, list[exp.Expr]]] = []
        subject = node.this
        if subject is not None:
            out.append((subject, []))
        missed: list[exp.Expr] = []
        for branch in node.args.get("ifs") or []:
            condition = branch.this
            if subject is not None:
                condition = exp.EQ(this=exp.paren(subject.copy()), expression=condition.copy())
            out.append((branch.this, list(missed)))
            out.append((branch.args["true"], [*missed, _is_true(condition)]))
            missed.append(_not_true(condition))
        if node.args.get("default") is not None:
            out.append((node.args["default"], missed))
        return out
    if isinstance(node, exp.If):
        condition = node.this
        taken = [(node.args["true"], [_is_true(condition)])]
        if node.args.get("false") is not None:
            taken.append((node.args["false"], [_not_true(condition)]))
        return [(condition, []), *taken]
    if isinstance(node, exp.Nvl2):
        out = [(node.this, []), (node.args["true"], [exp.not_(_is_null(node.this))])]
        if node.args.get("false") is not None:
            out.append((node.args["false"], [_is_null(node.this)]))
        return out
    if isinstance(node, exp.Coalesce):
        items = [node.this, *node.expressions]
        return [(item, [_is_null(before) for before in items[:i]]) for i, item in enumerate(items)]
    if isinstance(node, exp.And):
        return [
            (node.this, []),
            (node.expression, [exp.func("COALESCE", exp.paren(node.this.copy()), exp.true())]),
        ]
    if isinstance(node, exp.Or):
        return [(node.this, []), (node.expression, [_not_true(node.this)])]
    return []


def checked_casts(expression: exp.Expr, schema: pa.Schema, what: str) -> list[CastCheck]:
    """Every plain CAST in `expression` that can fail, with the predicate telling that
    it failed on a row (see CastCheck). A CAST inside a lambda cannot be judged outside
    it: refused unless it cannot fail (to STRING), TRY_CAST says NULL is wanted."""
    checks: list[CastCheck] = []

    def visit(node: exp.Expr, guard: list[exp.Expr], in_lambda: bool) -> None:
        cast = _plain_cast(node)
        if cast is not None:
            operand, to = cast
            if to.this not in _NEVER_FAILS and not _same_type(operand, to, schema):
                cast_sql = node.sql(dialect=DIALECT)
                if in_lambda:
                    raise ExpressionError(
                        f"{what}: {cast_sql} inside a lambda would give NULL on a value it "
                        f"cannot convert, and that cannot be caught per row; write "
                        f"TRY_CAST(... AS {to.sql(dialect=DIALECT)}) to accept NULL there"
                    )
                failed = exp.and_(
                    *guard,
                    exp.not_(_is_null(operand)),
                    exp.Is(
                        this=exp.TryCast(this=operand.copy(), to=to.copy(), safe=True),
                        expression=exp.Null(),
                    ),
                )
                checks.append(
                    CastCheck(cast_sql, operand.sql(dialect=DIALECT), failed.sql(dialect=DIALECT))
                )
        guarded = _guarded_children(node)
        if guarded:
            for child, conditions in guarded:
                visit(child, [*guard, *conditions], in_lambda)
            return
        for child in node.iter_expressions():
            visit(child, guard, in_lambda or isinstance(node, exp.Lambda))

    visit(expression, [], False)
    return checks


def _same_type(operand: exp.Expr, to: exp.DataType, schema: pa.Schema) -> bool:
    """True when the operand already has the target type (the CAST cannot fail)."""
    if any(isinstance(n, exp.Lambda) for n in operand.walk()):
        return False
    inferred = infer_arrow_type(operand, schema)
    return inferred is not None and inferred == arrow_type(to)
