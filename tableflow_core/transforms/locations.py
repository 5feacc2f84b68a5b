"""Where a transform or check was written: file:line of a key below a table."""

from __future__ import annotations

import re
from collections.abc import Callable

from tableflow_core.config.errors import ConfigProblem
from tableflow_core.config.project import SourceLocation, Table

# "transforms[1].where" -> the file:line of that key (or of its closest written parent).
Locator = Callable[[str], SourceLocation]

_LAST_PART = re.compile(r"(\.[^.\[\]]+|\[\d+\])$")


def parent_key(key: str) -> str:
    """'transforms[1].where' -> 'transforms[1]' -> 'transforms' -> ''."""
    return _LAST_PART.sub("", key) if _LAST_PART.search(key) else ""


def table_locator(table: Table) -> Locator:
    """A Locator over the keys the loader recorded for `table`."""

    def locate(key: str) -> SourceLocation:
        current = key
        while current:
            line = table.key_lines.get(current)
            if line is not None:
                return SourceLocation(table.source.file, line)
            current = parent_key(current)
        return table.source

    return locate


def problem_at(locate: Locator, key: str, message: str) -> ConfigProblem:
    location = locate(key)
    return ConfigProblem(message, location.file, location.line, key)


_INDEX = re.compile(r"^[a-z_]+\[(\d+)\]")


def step_index(key: str) -> int | None:
    """'transforms[3]' or 'checks[3].columns' -> 3 (None: no index)."""
    match = _INDEX.match(key)
    return int(match.group(1)) if match else None
