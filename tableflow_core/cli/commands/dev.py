from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from tableflow_core.cli.context import CliContext

if TYPE_CHECKING:
    from tableflow_core.config.project import Project
    from tableflow_core.dev.stack import StackSettings, StackStatus


def stack_settings(ctx: CliContext, project: Project) -> StackSettings:
    from tableflow_core.catalog.project_settings import embedded_server_settings
    from tableflow_core.config.models import EmbeddedCatalog
    from tableflow_core.dev.stack import StackSettings

    ports = project.target.dev_stack
    if ports is None:
        ctx.fail(
            f"target {project.target_name!r} has no dev_stack section; the local stack is for development targets"
        )
    catalog = project.target.catalog
    extra: dict[str, Any] = {}
    if isinstance(catalog, EmbeddedCatalog):
        server = embedded_server_settings(project, catalog, auth="none")
        extra["catalog_database_url"] = server.resolved_database_url
        if server.storage is None:
            extra["catalog_warehouse_dir"] = server.warehouse
        else:
            if ports.s3_port is None:
                ctx.fail(
                    f"the warehouse {catalog.warehouse} is on S3: give dev_stack.s3_port "
                    "(the port of the S3 server `tableflow dev up` starts)"
                )
            # The catalog started by the stack uses the stack's own keys.
            extra["catalog_storage"] = server.storage.model_copy(
                update={"access_key_id": None, "secret_access_key": None, "session_token": None}
            )
            extra["catalog_warehouse_uri"] = server.warehouse_uri
            extra["s3_port"] = ports.s3_port
            extra["s3_bucket"] = server.warehouse_uri.split("://", 1)[1].split("/", 1)[0]
    return StackSettings(
        data_dir=project.resolve_path(ports.data_dir),
        host=ports.host,
        kafka_port=ports.kafka_port,
        registry_port=ports.registry_port,
        catalog_port=ports.catalog_port,
        **extra,
    )


def print_status(ctx: CliContext, status: StackStatus, title: str) -> None:
    from rich.table import Table as RichTable

    table = RichTable(title=title)
    for column in ("component", "state", "address", "pid", "detail"):
        table.add_column(column)
    for row in status.rows():
        style = "green" if row["state"] == "running" else "yellow"
        table.add_row(
            row["component"],
            f"[{style}]{row['state']}[/]",
            row["address"],
            row["pid"],
            row["detail"],
        )
    ctx.console.print(table)


@click.group("dev")
def command() -> None:
    """The local development stack: broker, schema registry, Iceberg REST catalog."""


@command.command("up")
@click.pass_obj
def up(ctx: CliContext) -> None:
    """Start the stack (idempotent); data stays under the project and survives down/up."""
    from tableflow_core.dev import stack

    settings = stack_settings(ctx, ctx.load_project())
    status = stack.up(settings)
    print_status(ctx, status, "tableflow dev stack")


@command.command("status")
@click.pass_obj
def status(ctx: CliContext) -> None:
    """Show what runs where."""
    from tableflow_core.dev import stack

    settings = stack_settings(ctx, ctx.load_project())
    current = stack.status(settings)
    print_status(ctx, current, "tableflow dev stack")
    if not current.running:
        raise SystemExit(1)


@command.command("down")
@click.pass_obj
def down(ctx: CliContext) -> None:
    """Stop what `dev up` started (nothing else); data is kept."""
    from tableflow_core.dev import stack

    settings = stack_settings(ctx, ctx.load_project())
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

    probe_bootstrap(project.target.kafka.bootstrap_servers)
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
