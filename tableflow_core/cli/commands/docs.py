"""`tableflow docs generate`: a static site with the lineage DAG and a page per table."""

from __future__ import annotations

from pathlib import Path

import click

from tableflow_core.cli.context import CliContext


@click.group("docs")
def command() -> None:
    """Project documentation (like `dbt docs`)."""


@command.command("generate")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Output folder (default: target/docs in the project).",
)
@click.option(
    "--offline",
    is_flag=True,
    help="Use the project files only (no catalog, registry or Kafka reads).",
)
@click.pass_obj
def generate(ctx: CliContext, out: Path | None, offline: bool) -> None:
    """Write index.html (the DAG: topics, tables, DLQ targets, catalogs) and a page per table."""
    from tableflow_core.tasks.docs import DocsGenerateTask

    project = ctx.load_project(connects=not offline)
    result = DocsGenerateTask(project, ctx.selected_tables(), out, offline).run()
    for note in result.notes:
        ctx.err_console.print(f"[yellow]note:[/] {note}", highlight=False)
    ctx.console.print(
        f"Wrote {len(result.pages) + 1} pages to {result.out_dir}; open {result.index}",
        highlight=False,
        soft_wrap=True,
    )
