"""The `tableflow` command line.

Commands are imported when used (or listed by --help), and each command imports its
heavy dependencies (pyspark, pyiceberg, the catalog server...) inside its function:
`tableflow --help` loads click and little else (0.17 s of CPU, 0.92 s with the catalog
server imported: docs/performance.md). That is why the CLI's modules import the project's
packages inside functions; the rest of the code imports at the top.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import sys
from pathlib import Path
from typing import Any

import click

from tableflow_core.cli.context import CliContext
from tableflow_core.cli.options import add_global_options, group_options
from tableflow_core.errors import TableflowError

# One module per command under tableflow_core/cli/commands/; each exposes `command`.
COMMAND_MODULES = (
    "init",
    "validate",
    "compile",
    "dev",
    "catalog",
    "query",
    "plan",
    "apply",
    "run",
    "status",
    "docs",
    "maintain",
)


def _load(module_name: str) -> click.Command | None:
    try:
        module = importlib.import_module(f"tableflow_core.cli.commands.{module_name}")
    except ModuleNotFoundError as exc:
        # A command whose module has not landed yet is simply absent.
        if exc.name and exc.name.startswith("tableflow_core.cli.commands"):
            return None
        raise
    command: click.Command = module.command
    return add_global_options(command)


class LazyGroup(click.Group):
    """Loads a command's module only when that command is run or listed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._all_loaded = False

    def _load_all(self) -> None:
        if not self._all_loaded:
            for name in COMMAND_MODULES:
                command = _load(name)
                if command is not None and command.name not in self.commands:
                    self.add_command(command)
            self._all_loaded = True

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            module_name = cmd_name.replace("-", "_")
            command = _load(module_name) if module_name in COMMAND_MODULES else None
            if command is not None and command.name == cmd_name:
                self.add_command(command)
            else:
                self._load_all()
        return self.commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_all()
        return sorted(self.commands)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a TableflowError ends it with its message and exit code (the
        one place the CLI handles them: `CliContext.report`). Any other exception is a
        bug, and keeps its traceback."""
        try:
            return super().invoke(ctx)
        except TableflowError as exc:
            context = (
                ctx.obj if isinstance(ctx.obj, CliContext) else CliContext(Path("."), None, (), {})
            )
            context.report(exc)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tableflow")
@group_options
@click.pass_context
def cli(
    ctx: click.Context,
    project_dir: Path,
    target: str | None,
    selectors: tuple[str, ...],
    vars_: dict[str, object],
) -> None:
    """tableflow: Kafka topics to Apache Iceberg tables, as code.

    Global options (--project-dir, --target, --select, --vars) go before or after
    the command: `tableflow --target prod plan` and `tableflow plan --target prod`.

    Exit codes: 0 ok, 1 error, 2 usage error (and, with plan --detailed-exitcode, changes present).
    """
    ctx.obj = CliContext(
        project_dir=project_dir, target=target, selectors=selectors, vars=dict(vars_)
    )


def main() -> None:
    """The `tableflow` console script (and `python -m tableflow_core`)."""
    ending = ProcessEnding()
    atexit.register(ending.end)  # registered first, so it runs after every other handler
    try:
        cli(prog_name="tableflow")
    except SystemExit as exc:
        ending.status = exit_status(exc.code)
        raise


class ProcessEnding:
    """Ends the process once the command and every exit handler are done, skipping the
    interpreter's teardown: freeing every module and object of a command that loaded
    pyspark, pyiceberg and the catalog server took ~0.5 s after the last output."""

    status = 1  # a command that raised anything but SystemExit

    def end(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing to flush
                stream.flush()
        os._exit(self.status)


def exit_status(code: object) -> int:
    """The process status Python gives a SystemExit with this `code`."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1
