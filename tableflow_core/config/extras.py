"""Configured features that need an optional extra of the `tableflow` package.

A plain `pip install tableflow` (and `scripts/demo.sh`) installs what every project runs;
a feature whose engine is large ships as an extra (pyproject.toml). A project that
declares such a feature without its extra is refused by `plan` at the key's file:line
(`plan/capabilities.py`), and the engine's import says the same if it is reached anyway.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from tableflow_core.config.project import Table
from tableflow_core.errors import TableflowError


@dataclass(frozen=True)
class Extra:
    name: str  # pip's extra: `tableflow[<name>]`
    module: str  # what it installs, as imported
    feature: str  # what needs it, for messages
    key: str  # the table key that declares the feature
    used_by: Callable[[Table], bool]

    @property
    def install(self) -> str:
        return f"pip install 'tableflow[{self.name}]'"

    def missing_message(self) -> str:
        return (
            f"{self.feature} run on {self.module.replace('_', '-')}, which is not installed: "
            f"{self.install} (in a checkout, `bash scripts/test.sh` installs it, or "
            f".venv/bin/pip install -e '.[{self.name}]')"
        )


CHECKS = Extra(
    name="checks",
    module="great_expectations",
    feature="data-quality checks",
    key="checks",
    used_by=lambda table: bool(table.checks),
)
EXTRAS: tuple[Extra, ...] = (CHECKS,)


class MissingExtraError(TableflowError, ImportError):
    """A feature's optional extra is not installed."""

    def __init__(self, extra: Extra) -> None:
        super().__init__(extra.missing_message())
        self.extra = extra


def is_installed(extra: Extra) -> bool:
    """Whether the extra's module can be imported (found, not imported: no import cost)."""
    try:
        return importlib.util.find_spec(extra.module) is not None
    except (ImportError, ValueError):
        return False


def missing_extras() -> frozenset[str]:
    """The names of the extras not installed here."""
    return frozenset(extra.name for extra in EXTRAS if not is_installed(extra))


def require(extra: Extra) -> None:
    """MissingExtraError unless `extra` is installed."""
    if not is_installed(extra):
        raise MissingExtraError(extra)
