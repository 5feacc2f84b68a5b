"""Config errors that name the file, line and field, and suggest fixes."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tableflow_core.errors import TableflowError


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with the project, located as precisely as we can."""

    message: str
    file: Path | None = None
    line: int | None = None
    field_path: str | None = None

    def render(self, root: Path | None = None) -> str:
        where = ""
        if self.file is not None:
            shown = self.file
            if root is not None:
                shown = _relative(self.file, root)
            where = f"{shown}:{self.line}" if self.line else f"{shown}"
        field = f" [{self.field_path}]" if self.field_path else ""
        prefix = f"{where}{field}: " if where or field else ""
        return f"{prefix}{self.message}"


class ConfigError(TableflowError):
    """The project cannot be loaded; carries every problem found, not just the first."""

    def __init__(self, problems: list[ConfigProblem], root: Path | None = None) -> None:
        self.problems = problems
        self.root = root
        super().__init__(self.render())

    def render(self) -> str:
        root = self.root.resolve() if self.root is not None else None  # once, not per problem
        return "\n".join(problem.render(root) for problem in self.problems)

    def user_message(self) -> str:
        return f"invalid project:\n{self.render()}"


@lru_cache(maxsize=256)  # a project's problems name few files; resolve() is a syscall each
def _relative(file: Path, root: Path) -> Path:
    """`file` relative to `root` if it is inside (as written, or once links are resolved)."""
    base = root.resolve()
    if file.is_relative_to(base):
        return file.relative_to(base)
    resolved = file.resolve()
    return resolved.relative_to(base) if resolved.is_relative_to(base) else file
