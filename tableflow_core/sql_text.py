"""Spark SQL text: quoted identifiers and string literals.

Expressions built as SQL text reach the JVM in one call (`selectExpr`, `F.expr`), where
the same expression built from `pyspark.sql.functions` costs a round trip per function,
column and operator (a table's pre-write stages made ~500 of them).
"""

from __future__ import annotations


def quote_ident(name: str) -> str:
    """`name` as a back-quoted Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """A single-quoted Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
