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
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

DIALECT = "spark"
# Columns the pipeline carries beside the table's (source partition and offset); users
# cannot reference or create them.
HIDDEN_PREFIX = "__tf_"
_INPUT = "__tf_input"
_VALUE = "__tf_value"


class ExpressionError(ValueError):
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
