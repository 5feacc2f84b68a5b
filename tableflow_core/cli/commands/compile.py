from __future__ import annotations

import json

import click

from tableflow_core.cli.context import CliContext


@click.command("compile")
@click.pass_obj
def command(ctx: CliContext) -> None:
    """Print the fully resolved project (defaults applied, templates rendered) as JSON."""
    from tableflow_core.redaction import redact_mapping
    from tableflow_core.tasks.validate import compiled_project

    project = ctx.load_project(connects=False)
    data = compiled_project(project, ctx.selected_tables())
    # SecretStr fields are masked by the models; secret-keyed settings (kafka.config,
    # catalog properties, Spark conf) and URL passwords here; redact() catches the rest.
    click.echo(project.redact(json.dumps(redact_mapping(data), indent=2)))
