"""The `tableflow` command line."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import click

from tableflow_core.cli.context import CliContext

# One module per command under tableflow_core/cli/commands/; each exposes `command`.
COMMAND_MODULES = ("init", "validate", "compile", "dev", "catalog", "query", "plan", "apply", "run", "maintain")  # fmt: skip


def _parse_vars(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> dict[str, object]:
    if not value:
        return {}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        import yaml

        parsed = yaml.safe_load(value)
    if not isinstance(parsed, dict):
        raise click.BadParameter('expected a JSON or YAML mapping, e.g. \'{"namespace": "test"}\'')
    return parsed


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tableflow")
@click.option(
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    envvar="TABLEFLOW_PROJECT_DIR",
    show_default=True,
    help="Folder holding tableflow_project.yml.",
)
@click.option(
    "--target",
    "-t",
    envvar="TABLEFLOW_TARGET",
    help="Target from the project (default: default_target).",
)
@click.option(
    "--select",
    "-s",
    "selectors",
    multiple=True,
    help="Table names, globs or tag:NAME; repeat or comma-separate. Default: all tables.",
)
@click.option(
    "--vars", "vars_", callback=_parse_vars, help="Override project vars (JSON or YAML mapping)."
)
@click.pass_context
def cli(
    ctx: click.Context,
    project_dir: Path,
    target: str | None,
    selectors: tuple[str, ...],
    vars_: dict[str, object],
) -> None:
    """tableflow: Kafka topics to Apache Iceberg tables, as code.

    Exit codes: 0 ok, 1 error, 2 usage error (and, with plan --detailed-exitcode, changes present).
    """
    ctx.obj = CliContext(
        project_dir=project_dir, target=target, selectors=selectors, vars=dict(vars_)
    )


def _register_commands() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"tableflow_core.cli.commands.{name}")
        except ModuleNotFoundError as exc:
            # A command whose module has not landed yet is simply absent.
            if exc.name and exc.name.startswith("tableflow_core.cli.commands"):
                continue
            raise
        cli.add_command(module.command)


_register_commands()


def main() -> None:
    cli()
