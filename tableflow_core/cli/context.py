"""What every command receives: global options and ways to load the project.

Imports of the project's heavier modules (pydantic models, rich) happen on first
use, so `tableflow --help` stays fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from rich.console import Console

    from tableflow_core.cli.events import EventLog
    from tableflow_core.config.project import Project, Table
    from tableflow_core.errors import TableflowError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

# Wide enough that no line of a plan, a query or a status table is ever wrapped or cut.
NON_TTY_WIDTH = 100_000


def make_console(stderr: bool = False) -> Console:
    """A console for stdout or stderr; when it is not a terminal (CI logs, pipes),
    never wrap and never truncate: lines keep their full length."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=NON_TTY_WIDTH, soft_wrap=True)


@dataclass
class CliContext:
    project_dir: Path
    target: str | None
    selectors: tuple[str, ...]
    vars: dict[str, Any]
    _console: Console | None = field(default=None, repr=False)
    _err_console: Console | None = field(default=None, repr=False)
    _project: Project | None = None
    # `--log-format json`: the command's lines are JSON events (cli/events.py).
    events: EventLog | None = None

    def use_log_format(self, log_format: str, command: str) -> None:
        """`json`: the command logs JSON events on stdout; the consoles print nothing
        (what they would print is in the events)."""
        if log_format != "json":
            return
        from rich.console import Console

        from tableflow_core.cli.events import EventLog

        def redact(text: str) -> str:
            return self._project.redact(text) if self._project is not None else text

        self.events = EventLog(command, sys.stdout, redact)
        discard = open(os.devnull, "w")  # noqa: SIM115 (kept for the command's life)
        self._console = Console(file=discard, width=NON_TTY_WIDTH)
        self._err_console = Console(file=discard, width=NON_TTY_WIDTH)

    @property
    def console(self) -> Console:
        if self._console is None:
            self._console = make_console()
        return self._console

    @property
    def err_console(self) -> Console:
        if self._err_console is None:
            self._err_console = make_console(stderr=True)
        return self._err_console

    def load_project(self, connects: bool = True) -> Project:
        """The project, loaded once (a ConfigError ends the command: `report`).

        `connects`: the command talks to the target's Kafka, registry or catalog. When the
        target's config takes addresses from the project's local stack (`dev_stack()`),
        that stack must be running: a project never talks to a stack it did not start
        (`StackNotRunningError`, whatever else listens on those ports)."""
        from tableflow_core.config.loader import load_project

        if self._project is None:
            self._project = load_project(self.project_dir, self.target, self.vars)
        use = self._project.dev_stack_use
        if connects and use is not None:
            from tableflow_core.dev.stack import require_running

            require_running(use.data_dir, use.components, self._project.target_name)
        return self._project

    def reload_project(self, connects: bool = True) -> Project:
        """The project loaded again (after `dev up` wrote the stack's record)."""
        self._project = None
        return self.load_project(connects)

    def selected_tables(self) -> tuple[Table, ...]:
        from tableflow_core.config.selection import select_tables

        return select_tables(self.load_project(connects=False).tables, self.selectors)

    def warn(self, warnings: Iterable[str], indent: int = 11) -> None:
        """Warning lines on the console (stdout, beside the results they qualify)."""
        from rich.markup import escape

        for warning in warnings:
            text = self._project.redact(warning) if self._project is not None else warning
            if self.events is not None:
                self.events.emit("warning", level="warning", message=text)
                continue
            self.console.print(f"{' ' * indent}[yellow]warning:[/] {escape(text)}", highlight=False)

    def report(self, exc: TableflowError) -> NoReturn:
        """End the command on a tableflow error: its message, and its exit code. The one
        place the CLI handles them (`cli/main.py` LazyGroup.invoke)."""
        message = exc.user_message()
        if exc.component_down:
            self.unreachable(message)
        if exc.changes_nothing:
            message += "\nNothing was changed."
        self.fail(message, exc.exit_code)

    def unreachable(self, exc: Exception | str, *, changes: bool = True) -> NoReturn:
        """A component (Kafka, registry, catalog) is down: say which, and on a target
        with a local stack, how to start it. `changes=False`: a command that never
        changes anything (no "Nothing was changed.")."""
        message = f"{exc}\nNothing was changed." if changes else str(exc)
        project = self._project
        if (
            project is not None
            and project.target.dev_stack is not None
            and "tableflow dev up" not in message
        ):
            message += (
                f"\nTarget {project.target_name!r} uses the local stack: is it running? "
                "Start it with `tableflow dev up` (and check it with `tableflow dev status`)."
            )
        self.fail(message)

    def fail(self, message: str, code: int = EXIT_ERROR) -> NoReturn:
        """Print an error (secrets redacted) and exit."""
        from rich.markup import escape

        if self._project is not None:
            message = self._project.redact(message)
        if self.events is not None:
            self.events.emit("error", level="error", message=message, exit_code=code)
            raise SystemExit(code)
        # Messages quote user input (e.g. `[tables[0].mode]`): escape it, never parse it as markup.
        self.err_console.print(
            f"[bold red]Error:[/] {escape(message)}", markup=True, highlight=False
        )
        raise SystemExit(code)
