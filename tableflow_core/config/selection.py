"""`--select`: choose tables by name, tag or glob."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from tableflow_core.config.project import Table
from tableflow_core.errors import TableflowError


class SelectionError(TableflowError, ValueError):
    pass


def select_tables(tables: Iterable[Table], selectors: Iterable[str]) -> tuple[Table, ...]:
    """Tables matching any selector; all tables when there are no selectors.

    A selector is a table name, a glob over names (`orders_*`), or `tag:NAME`.
    A selector that matches nothing is an error (a typo must not silently plan nothing).
    """
    all_tables = tuple(tables)
    chosen = [s.strip() for selector in selectors for s in selector.split(",") if s.strip()]
    if not chosen:
        return all_tables
    selected: dict[str, Table] = {}
    for selector in chosen:
        matches = [t for t in all_tables if _matches(t, selector)]
        if not matches:
            names = ", ".join(t.name for t in all_tables) or "none"
            raise SelectionError(f"--select {selector!r} matches no table (tables: {names})")
        for table in matches:
            selected[table.name] = table
    return tuple(t for t in all_tables if t.name in selected)


def _matches(table: Table, selector: str) -> bool:
    if selector.startswith("tag:"):
        return selector[4:] in table.tags
    return fnmatch.fnmatchcase(table.name, selector)
