from __future__ import annotations

import click

from tableflow_core.cli.context import CliContext


@click.group("catalog")
def command() -> None:
    """The embedded Iceberg REST catalog."""


@command.command("serve")
@click.option("--host", help="Bind address (default: from the target's catalog).")
@click.option("--port", type=int, help="Port (default: from the target's catalog).")
@click.option(
    "--allow-location",
    "allowed_locations",
    multiple=True,
    metavar="PREFIX",
    help="A location prefix besides the warehouse where tables may live (repeatable), "
    "e.g. another project's warehouse whose tables are published here.",
)
@click.pass_obj
def serve(
    ctx: CliContext, host: str | None, port: int | None, allowed_locations: tuple[str, ...]
) -> None:
    """Run the target's embedded catalog server in the foreground."""
    from tableflow_core.catalog import serve_forever
    from tableflow_core.catalog.project_settings import embedded_server_settings
    from tableflow_core.config.models.catalogs import EmbeddedCatalog

    project = ctx.load_project(connects=False)
    config = project.target.catalog
    if not isinstance(config, EmbeddedCatalog):
        ctx.fail(
            f"target {project.target_name!r} uses a {config.type} catalog; only `embedded` is served by tableflow"
        )
    overrides: dict[str, object] = {}
    if host:
        overrides["host"] = host
    if port is not None:
        overrides["port"] = port
    if allowed_locations:
        overrides["allowed_locations"] = allowed_locations
    try:
        settings = embedded_server_settings(project, config, **overrides)
    except ValueError as exc:
        ctx.fail(str(exc))
    ctx.err_console.print(
        f"Serving catalog {config.name!r} on http://{settings.host}:{settings.port} "
        f"(warehouse {settings.warehouse}, auth {settings.auth})"
    )
    serve_forever(settings)
