from __future__ import annotations

import click

from tableflow_core.cli.context import CliContext
from tableflow_core.errors import TableflowError


@click.command("query")
@click.argument("sql")
@click.option("--limit", type=int, default=100, show_default=True, help="Rows shown at most.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "csv", "json", "markdown"]),
    default="table",
    show_default=True,
    help="table for people; csv, json (an array of objects) or markdown for tools and docs.",
)
@click.pass_obj
def command(ctx: CliContext, sql: str, limit: int, output_format: str) -> None:
    """Run SQL with DuckDB against the target's Iceberg REST catalog.

    Tables are named `namespace.table` (the first table's namespace is the default
    schema) or `<catalog>.namespace.table`.
    """
    from tableflow_core.readers.duckdb_reader import (
        TEXT_FORMATS,
        attach_rest_catalog,
        duckdb_connection,
    )
    from tableflow_core.targets.catalog import open_catalog

    project = ctx.load_project()
    default_schema = project.tables[0].namespace[0] if project.tables else None
    try:
        with open_catalog(project) as handle:
            props = handle.spark_properties
            if props.get("type") != "rest":
                ctx.fail("tableflow query needs a REST catalog (embedded or rest)")
            con = duckdb_connection()
            access = handle.storage.duckdb_access() if handle.storage else None
            attach_rest_catalog(
                con,
                handle.spark_name,
                props["uri"],
                props.get("credential"),
                default_schema=default_schema,
                s3_secret=None if access is None or access.vended else access.secret_options,
            )
            result = con.sql(sql)
            columns = result.columns
            rows = result.fetchmany(limit)
    except TableflowError:
        raise  # the CLI's one handler (cli/main.py)
    except Exception as exc:  # duckdb errors: show the message, not a traceback
        ctx.fail(f"query failed: {exc}")
    if output_format in TEXT_FORMATS:
        click.echo(TEXT_FORMATS[output_format](columns, rows), nl=False)
        return
    from rich.table import Table as RichTable

    # Off a terminal the console is unbounded (see make_console): no column is cut.
    table = RichTable()
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("NULL" if value is None else str(value) for value in row))
    ctx.console.print(table)
