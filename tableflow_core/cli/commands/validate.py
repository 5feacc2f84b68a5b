from __future__ import annotations

import click

from tableflow_core.cli.context import CliContext
from tableflow_core.text import plural


@click.command("validate")
@click.pass_obj
def command(ctx: CliContext) -> None:
    """Check the project's files: syntax, keys, types, references. No connections."""
    project = ctx.load_project()
    tables = ctx.selected_tables()
    ctx.console.print(
        f"[green]OK[/] project [bold]{project.name}[/], target [bold]{project.target_name}[/]: "
        f"{plural(len(tables), 'table')} valid"
    )
    for table in tables:
        ctx.console.print(
            f"  {table.name} <- {table.topic} -> {table.identifier} ({table.mode})", highlight=False
        )
