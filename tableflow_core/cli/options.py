"""The global options (`--project-dir`, `--target`, `--select`, `--vars`).

dbt users type them after the subcommand (`tableflow apply --select tag:x`), others
before it (`tableflow --target prod plan`): both work. The group reads them first
(with their environment variables); every subcommand gets copies that, when given on
its command line, override the group's value (`--select` and `--vars` add to it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from tableflow_core.cli.context import CliContext


def parse_vars(_ctx: click.Context, _param: click.Parameter, value: str | None) -> dict[str, Any]:
    return vars_mapping(value)


def vars_mapping(value: str | None) -> dict[str, Any]:
    """`--vars` as a mapping: JSON, or YAML for the lazy typist."""
    if not value:
        return {}
    try:
        parsed = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        from tableflow_core.config.errors import ConfigError
        from tableflow_core.config.yaml_source import load_yaml

        try:  # the project's bounded YAML loader: no alias bombs, no deep nesting
            parsed = load_yaml(value, Path("--vars")).data
        except ConfigError as exc:
            raise click.BadParameter(exc.render()) from None
    if not isinstance(parsed, dict):
        raise click.BadParameter('expected a JSON or YAML mapping, e.g. \'{"namespace": "test"}\'')
    return parsed


PROJECT_DIR_HELP = "Folder holding tableflow_project.yml."
TARGET_HELP = "Target from the project (default: default_target)."
SELECT_HELP = "Table names, globs or tag:NAME; repeat or comma-separate. Default: all tables."
VARS_HELP = "Override project vars (JSON or YAML mapping)."


def group_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options on the `tableflow` group itself, with their defaults and env vars."""
    decorators = [
        click.option(
            "--project-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=Path("."),
            envvar="TABLEFLOW_PROJECT_DIR",
            show_default=True,
            help=PROJECT_DIR_HELP,
        ),
        click.option("--target", "-t", envvar="TABLEFLOW_TARGET", help=TARGET_HELP),
        click.option("--select", "-s", "selectors", multiple=True, help=SELECT_HELP),
        click.option("--vars", "vars_", callback=parse_vars, help=VARS_HELP),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def _apply(update: Callable[[CliContext, Any], None]) -> Callable[..., Any]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if (
            param.name is None
            or ctx.get_parameter_source(param.name) != ParameterSource.COMMANDLINE
        ):
            return value
        obj = ctx.find_object(CliContext)
        if obj is not None:
            update(obj, value)
        return value

    return callback


def _set_project_dir(obj: CliContext, value: Path) -> None:
    obj.project_dir = value


def _set_target(obj: CliContext, value: str) -> None:
    obj.target = value


def _add_selectors(obj: CliContext, value: tuple[str, ...]) -> None:
    obj.selectors = (*obj.selectors, *value)


def _merge_vars(obj: CliContext, value: str) -> None:
    obj.vars = {**obj.vars, **vars_mapping(value)}


def subcommand_options() -> list[click.Option]:
    """Fresh copies of the global options for one subcommand (not exposed to its function)."""
    return [
        click.Option(
            ["--project-dir", "_global_project_dir"],
            type=click.Path(file_okay=False, path_type=Path),
            expose_value=False,
            callback=_apply(_set_project_dir),
            help=PROJECT_DIR_HELP,
        ),
        click.Option(
            ["--target", "-t", "_global_target"],
            expose_value=False,
            callback=_apply(_set_target),
            help=TARGET_HELP,
        ),
        click.Option(
            ["--select", "-s", "_global_selectors"],
            multiple=True,
            expose_value=False,
            callback=_apply(_add_selectors),
            help=SELECT_HELP,
        ),
        click.Option(
            ["--vars", "_global_vars"],
            expose_value=False,
            callback=_apply(_merge_vars),
            help=VARS_HELP,
        ),
    ]


def add_global_options(command: click.Command) -> click.Command:
    """Give `command` (and, for a group, every subcommand) the global options:
    `tableflow dev --target x up` and `tableflow dev up --target x` both work.

    An option a command already declares under the same flag keeps the command's meaning.
    """
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_global_options(sub)
    taken = {opt for param in command.params for opt in getattr(param, "opts", ())}
    taken |= {opt for param in command.params for opt in getattr(param, "secondary_opts", ())}
    for option in subcommand_options():
        if any(opt in taken for opt in option.opts) or any(
            getattr(p, "name", None) == option.name for p in command.params
        ):
            continue
        command.params.append(option)
    return command


def log_format_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """`--log-format console|json` of the commands that run tables (run, apply, maintain)."""
    return click.option(
        "--log-format",
        type=click.Choice(["console", "json"]),
        default="console",
        show_default=True,
        help="console: lines for people; json: one JSON object per line on stdout, for a "
        "log collector (docs/observability.md).",
    )(func)
