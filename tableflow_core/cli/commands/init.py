from __future__ import annotations

from pathlib import Path

import click

from tableflow_core.cli.context import CliContext
from tableflow_core.text import plural


@click.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--name", help="Project name (default: the folder name).")
@click.pass_obj
def command(ctx: CliContext, directory: Path, name: str | None) -> None:
    """Create a new project in DIRECTORY from the template."""
    from tableflow_core.tasks.init import InitTask

    created = InitTask(directory, name).run()
    ctx.console.print(f"Created project in [bold]{directory}[/] ({plural(len(created), 'file')}):")
    for path in created:
        ctx.console.print(f"  {path}")
    ctx.console.print(f"Next: cd {directory} && tableflow dev up && tableflow plan")
