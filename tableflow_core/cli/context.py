"""What every command receives: global options and ways to load the project."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.markup import escape

from tableflow_core.config.errors import ConfigError
from tableflow_core.config.loader import load_project
from tableflow_core.config.project import Project, Table
from tableflow_core.config.selection import SelectionError, select_tables

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


@dataclass
class CliContext:
    project_dir: Path
    target: str | None
    selectors: tuple[str, ...]
    vars: dict[str, Any]
    console: Console = field(default_factory=Console)
    err_console: Console = field(default_factory=lambda: Console(stderr=True))
    _project: Project | None = None

    def load_project(self) -> Project:
        """The project, loaded once; config errors end the command with exit 1."""
        if self._project is None:
            try:
                self._project = load_project(self.project_dir, self.target, self.vars)
            except ConfigError as exc:
                self.fail(f"invalid project:\n{exc.render()}")
        return self._project

    def selected_tables(self) -> tuple[Table, ...]:
        project = self.load_project()
        try:
            return select_tables(project.tables, self.selectors)
        except SelectionError as exc:
            self.fail(str(exc))

    def fail(self, message: str, code: int = EXIT_ERROR) -> NoReturn:
        """Print an error (secrets redacted) and exit."""
        if self._project is not None:
            message = self._project.redact(message)
        # Messages quote user input (e.g. `[tables[0].mode]`): escape it, never parse it as markup.
        self.err_console.print(
            f"[bold red]Error:[/] {escape(message)}", markup=True, highlight=False
        )
        raise SystemExit(code)
