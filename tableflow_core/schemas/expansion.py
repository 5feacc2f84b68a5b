"""Bounds on how far a registry schema expands into table columns ("schema bombs").

A named Avro type, a JSON Schema `$ref` or a Protobuf message used twice in each of N
nested types expands to 2^N columns: a 2.7 KB Avro schema made `plan` run for 159 s
in 2.5 GB, and a JSON Schema nested 300 deep ended in a RecursionError. Every mapping
counts the columns (fields at every level) and the nesting depth it produces and stops
at the first one over the limit, naming where; the caller adds which schema (topic,
subject and version). A walk that expands references counts as it goes, so the work
is bounded by the limit, not by the expansion.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa

from tableflow_core.schemas.arrow_values import SchemaMappingError

# The catalog refuses schemas of more than 10,000 fields too (catalog/updates.py).
MAX_COLUMNS = 10_000
# Levels of struct/list/map nesting; pyiceberg's schema visitors overflow Python's stack
# near 200.
MAX_DEPTH = 64
# Schema nodes a walker may have open on its way down (unions, `$ref`s and wrappers are
# nodes that add no column level): keeps the walkers' recursion far from Python's limit.
MAX_WALK_DEPTH = 2 * MAX_DEPTH


class ExpansionBudget:
    """Counts the columns a mapping produces; raises SchemaMappingError past a limit."""

    def __init__(self, max_columns: int = MAX_COLUMNS, max_depth: int = MAX_DEPTH) -> None:
        self.max_columns = max_columns
        self.max_depth = max_depth
        self.columns = 0
        self.open_nodes = 0  # a walker's schema nodes from the root to where it is

    def column(self, path: str) -> None:
        """One more column (a field at any level) at `path`."""
        self.columns += 1
        if self.columns > self.max_columns:
            raise SchemaMappingError(
                f"the schema expands to more than {self.max_columns:,} columns (the limit "
                f"was reached at {_shorten(path) or '<root>'}): a named type, $ref or message used "
                "several times in nested types multiplies its columns; flatten the schema "
                "or keep that part as one JSON/bytes field"
            )

    def level(self, depth: int, path: str) -> None:
        """A type nested `depth` levels deep at `path`."""
        if depth > self.max_depth:
            self._too_deep(path)

    @contextmanager
    def walking(self, path: str) -> Iterator[None]:
        """One more schema node open on a walker's way down, at `path` (see MAX_WALK_DEPTH)."""
        self.open_nodes += 1
        try:
            if self.open_nodes > MAX_WALK_DEPTH * self.max_depth // MAX_DEPTH:
                self._too_deep(path)
            yield
        finally:
            self.open_nodes -= 1

    def _too_deep(self, path: str) -> None:
        raise SchemaMappingError(
            f"the schema nests more than {self.max_depth} levels deep (at "
            f"{_shorten(path) or '<root>'})"
        )


def check_expansion(arrow_type: pa.DataType, budget: ExpansionBudget | None = None) -> None:
    """Walk `arrow_type` (shared sub-types expanded) until a limit is passed or all is seen.

    The walk stops at the first field over the limit, so it costs at most the limit,
    whatever the type's expanded size.
    """
    budget = budget or ExpansionBudget()
    for path, depth in _fields(arrow_type):
        budget.level(depth, path)
        budget.column(path)


def _fields(root: pa.DataType) -> Iterator[tuple[str, int]]:
    """(path, depth) of every field, depth first, lazily (no recursion)."""
    stack: list[tuple[pa.DataType, str, int]] = [(root, "", 0)]
    while stack:
        data_type, path, depth = stack.pop()
        children = list(_children(data_type, path))
        for child_type, child_path in reversed(children):
            yield child_path, depth + 1
            stack.append((child_type, child_path, depth + 1))


def _children(data_type: pa.DataType, path: str) -> Iterator[tuple[pa.DataType, str]]:
    if pa.types.is_struct(data_type):
        for i in range(data_type.num_fields):
            name = data_type.field(i).name
            yield data_type.field(i).type, f"{path}.{name}" if path else name
    elif pa.types.is_map(data_type):
        yield data_type.key_type, f"{path}{{key}}"
        yield data_type.item_type, f"{path}{{}}"
    elif pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        yield data_type.value_type, f"{path}[]"


def _shorten(path: str, keep: int = 120) -> str:
    return path if len(path) <= keep else f"{path[:50]}...{path[-(keep - 53) :]}"
