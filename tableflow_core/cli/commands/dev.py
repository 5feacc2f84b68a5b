from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from tableflow_core.cli.context import CliContext

if TYPE_CHECKING:
    from tableflow_core.config.project import Project
    from tableflow_core.dev.stack import CatalogLaunch, StackSettings, StackStatus


def stack_settings(ctx: CliContext, project: Project) -> StackSettings:
    from tableflow_core.dev.stack import StackSettings

    section = project.target.dev_stack
    if section is None:
        ctx.fail(
            f"target {project.target_name!r} has no dev_stack section; the local stack is for development targets"
        )
    return StackSettings(
        data_dir=project.resolve_path(section.data_dir),
        host=section.host,
        components=tuple(section.components),
        registry=section.registry,
        kafka_security=section.kafka_security,
        kafka_port=section.kafka_port,
        registry_port=section.registry_port,
        catalog_port=section.catalog_port,
        s3_port=section.s3_port,
        s3_bucket=section.s3_bucket,
    )


def catalog_launch(project: Project, port: int) -> CatalogLaunch | None:
    """The target's embedded catalog as the stack serves it (its warehouse, database and
    storage; no authentication, on the stack's port); None for another catalog type."""
    from tableflow_core.catalog.project_settings import embedded_server_settings
    from tableflow_core.catalog.runner import server_arguments
    from tableflow_core.config.models.catalogs import EmbeddedCatalog
    from tableflow_core.dev.stack import CatalogLaunch

    catalog = project.target.catalog
    if not isinstance(catalog, EmbeddedCatalog):
        return None
    server = embedded_server_settings(project, catalog, auth="none", port=port)
    if isinstance(server.warehouse, Path):
        server.warehouse.mkdir(parents=True, exist_ok=True)
    environment = server.storage.environment() if server.storage is not None else {}
    return CatalogLaunch(port, tuple(server_arguments(server)), environment)


def print_status(ctx: CliContext, status: StackStatus, title: str) -> None:
    from rich.table import Table as RichTable

    table = RichTable(title=title)
    for column in ("component", "what", "state", "address", "ports", "pid", "detail"):
        table.add_column(column)
    for row in status.rows():
        style = "green" if row["state"].startswith("running") else "yellow"
        table.add_row(
            row["component"],
            row["what"],
            f"[{style}]{row['state']}[/]",
            row["address"],
            row["ports"],
            row["pid"],
            row["detail"],
        )
    ctx.console.print(table)
    ctx.console.print(
        f"Stack of this project: {status.data_dir} (addresses in stack.json, credentials in "
        "credentials.json; the project's config reads them with dev_stack())."
    )


@click.group("dev")
def command() -> None:
    """This project's local stack: Apache Kafka, schema registry, Iceberg REST catalog, S3."""


@command.command("up")
@click.pass_obj
def up(ctx: CliContext) -> None:
    """Start the stack (idempotent); ports, data and credentials stay under the project."""
    from tableflow_core.dev import stack
    from tableflow_core.dev.stack import CATALOG

    settings = stack_settings(ctx, ctx.load_project(connects=False))
    record = stack.prepare(settings)  # the ports (and credentials) the config will read
    if CATALOG in settings.components:
        project = ctx.reload_project(connects=False)
        launch = catalog_launch(project, record.ports[CATALOG]["port"])
        settings = settings.model_copy(update={"catalog": launch})
    status = stack.up(settings)
    print_status(ctx, status, "tableflow dev stack")


@command.command("status")
@click.pass_obj
def status(ctx: CliContext) -> None:
    """Show what runs where (exit 1 unless every component runs)."""
    from tableflow_core.dev import stack

    settings = stack_settings(ctx, ctx.load_project(connects=False))
    current = stack.status(settings)
    print_status(ctx, current, "tableflow dev stack")
    if not current.running:
        raise SystemExit(1)


@command.command("down")
@click.pass_obj
def down(ctx: CliContext) -> None:
    """Stop what `dev up` started (nothing else); data, ports and credentials are kept."""
    from tableflow_core.dev import stack

    settings = stack_settings(ctx, ctx.load_project(connects=False))
    stopped = stack.down(settings)
    if not stopped:
        ctx.console.print("Nothing was running.")
    for component in stopped:
        ctx.console.print(f"stopped {component.name} (pid {component.pid})")


@command.command("produce")
@click.argument("dataset", type=click.Choice(["orders", "customers"]))
@click.option("--count", "-n", type=click.IntRange(min=1), default=10_000, show_default=True)
@click.option("--topic", help="Topic to produce to (default: the dataset name).")
@click.option("--partitions", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--seed", type=int, default=None, help="Random seed (default: a new one each time).")
@click.option(
    "--schema-version",
    type=click.IntRange(1, 2),
    default=1,
    show_default=True,
    help="2 adds an optional field, for schema-evolution demos.",
)
@click.option(
    "--format",
    "value_format",
    type=click.Choice(["avro", "json", "json_schema"]),
    default="avro",
    show_default=True,
    help="Values as Avro or JSON Schema through the registry, or plain JSON (no registry).",
)
@click.pass_obj
def produce(
    ctx: CliContext,
    dataset: str,
    count: int,
    topic: str | None,
    partitions: int,
    seed: int | None,
    schema_version: int,
    value_format: str,
) -> None:
    """Produce realistic keyed sample records: Avro (the default) or JSON Schema values
    through the registry (registers the schema), or plain JSON."""
    import random

    from tableflow_core.dev.producer import produce_sample

    project = ctx.load_project()
    registry = project.target.schema_registry
    if registry is None and value_format != "json":
        ctx.fail(
            f"target {project.target_name!r} has no schema_registry; "
            "`--format json` produces plain JSON without one"
        )
    from tableflow_core.kafka.admin import probe_bootstrap
    from tableflow_core.targets.kafka import kafka_connection_config

    probe_bootstrap(project.target.kafka.bootstrap_servers)
    kafka_config = kafka_connection_config(project.target.kafka)
    kafka_config.pop("bootstrap.servers")
    registry_config: dict[str, object] = {}
    if registry is not None and registry.basic_auth is not None:
        registry_config["basic.auth.user.info"] = (
            f"{registry.basic_auth.username}:{registry.basic_auth.password.get_secret_value()}"
        )
    try:
        result = produce_sample(
            dataset,
            project.target.kafka.bootstrap_servers,
            registry.url if registry is not None else "",
            topic or dataset,
            count,
            partitions=partitions,
            seed=seed if seed is not None else random.randrange(1 << 30),
            schema_version=schema_version,
            registry_config=registry_config,
            value_format=value_format,
            kafka_config=kafka_config,
        )
    except Exception as exc:  # broker or registry down: say which, never a traceback
        ctx.fail(f"producing to {topic or dataset} failed: {exc or type(exc).__name__}")
    encoding = (
        "plain JSON"
        if result.schema_id is None
        else f"{value_format}, schema id {result.schema_id}"
    )
    ctx.console.print(
        f"Produced {result.records:,} {dataset} records to [bold]{topic or dataset}[/] "
        f"({result.records_per_second:,.0f} records/s, {encoding})"
    )
