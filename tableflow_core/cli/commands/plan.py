"""`tableflow plan`: show what apply would do. No JVM, read-only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from tableflow_core.cli.context import EXIT_ERROR, CliContext
from tableflow_core.collector import paused_collector

if TYPE_CHECKING:
    from tableflow_core.plan.plan import Plan
    from tableflow_core.plan.world_state import WorldState
    from tableflow_core.targets.catalog import CatalogHandle

EXIT_CHANGES = 2


def fail_fast_if_kafka_is_down(ctx: CliContext) -> None:
    """One TCP connection before anything slow (importing the planner, starting an
    embedded catalog): a stack that is down is reported at once."""
    from tableflow_core.kafka.admin import probe_bootstrap

    probe_bootstrap(ctx.load_project().target.kafka.bootstrap_servers)


def run_plan(
    ctx: CliContext, allow_destructive: bool, prune: bool, handle: CatalogHandle | None = None
) -> tuple[Plan, WorldState | None]:
    """Shared by plan and apply (without a plan file); `handle`: an open catalog.
    Returns the plan and the world it was made from."""
    project = ctx.load_project()
    tables = ctx.selected_tables()
    if tables:
        fail_fast_if_kafka_is_down(ctx)
    from tableflow_core.plan.plan import PlanOptions
    from tableflow_core.tasks.plan import PlanTask

    task = PlanTask(
        project,
        tables,
        selectors=ctx.selectors,
        options=PlanOptions(allow_destructive=allow_destructive, prune=prune),
        handle=handle,
    )
    return task.run(), task.world


def show_plan(ctx: CliContext, plan: Plan, output_format: str, show_dag: bool) -> None:
    if output_format == "json":
        from tableflow_core.plan.render_json import render_json

        click.echo(render_json(plan))
    elif output_format == "markdown":
        from tableflow_core.plan.render_markdown import render_markdown

        click.echo(render_markdown(plan), nl=False)
    elif output_format == "compact":
        from tableflow_core.plan.render_human import render_compact

        render_compact(plan, ctx.console)
    else:
        from tableflow_core.plan.render_human import render_human

        render_human(plan, ctx.console, show_dag=show_dag)


@click.command("plan")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the plan as JSON (docs/plan-json-schema.md)."
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["human", "json", "markdown"]),
    default="human",
    show_default=True,
    help="Output format; markdown suits pull-request comments.",
)
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Save the plan for `tableflow apply FILE`.",
)
@click.option(
    "--detailed-exitcode", is_flag=True, help="Exit 0: no changes, 1: error, 2: changes present."
)
@click.option(
    "--allow-destructive", is_flag=True, help="Allow replacing tables (drops their data)."
)
@click.option(
    "--prune",
    is_flag=True,
    help="Drop catalog tables in the project's namespaces the project no longer declares.",
)
@click.option("--show-dag", is_flag=True, help="Also print the DAG of tasks apply would run.")
@click.pass_obj
def command(
    ctx: CliContext,
    as_json: bool,
    output_format: str,
    out: Path | None,
    detailed_exitcode: bool,
    allow_destructive: bool,
    prune: bool,
    show_dag: bool,
) -> None:
    """Compare the project with the catalog, registry and Kafka; show what apply would do."""
    # Also across the planner's imports and the rendering (tableflow_core/collector.py).
    with paused_collector():
        plan, _ = run_plan(ctx, allow_destructive, prune)
        show_plan(ctx, plan, "json" if as_json else output_format, show_dag)
    if out is not None:
        from tableflow_core.plan.plan_file import save_plan

        save_plan(plan, out)
        ctx.err_console.print(
            f"Saved the plan to {out}; apply it with `tableflow apply {out}`.", highlight=False
        )
    if plan.blockers:
        raise SystemExit(EXIT_ERROR)
    if detailed_exitcode and plan.has_changes:
        raise SystemExit(EXIT_CHANGES)
