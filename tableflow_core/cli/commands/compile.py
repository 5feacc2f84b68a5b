from __future__ import annotations

import json

import click

from tableflow_core.cli.context import CliContext


@click.command("compile")
@click.pass_obj
def command(ctx: CliContext) -> None:
    """Print the fully resolved project (defaults applied, templates rendered) as JSON."""
    from tableflow_core.tasks.validate import compiled_project

    project = ctx.load_project()
    data = compiled_project(project, ctx.selected_tables())
    # Secrets are masked by the models; redact() also catches any that leaked into free text.
    click.echo(project.redact(json.dumps(data, indent=2)))
