"""`tableflow apply [PLAN_FILE]`: make the tables match the project and ingest new records."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tableflow_core.cli.commands.plan import fail_fast_if_kafka_is_down, run_plan, show_plan
from tableflow_core.cli.context import CliContext
from tableflow_core.cli.options import log_format_option
from tableflow_core.text import plural

if TYPE_CHECKING:
    from tableflow_core.config.project import Project, Table
    from tableflow_core.engine.spark_session import SessionStarter
    from tableflow_core.runner.results import RunResults
    from tableflow_core.targets.catalog import CatalogHandle


# Up to this many selected tables the JVM starts while the plan is made: such a plan takes
# about a second, which the overlap saves on every cold apply (a no-op apply does not wait
# for the JVM: it exits with the process). Past it, the plan takes seconds of CPU that a
# starting JVM would compete with on a small machine.
EARLY_SPARK_START_MAX_TABLES = 50


@dataclass(frozen=True)
class ApplyFlags:
    """What `apply` was asked to do: its command-line flags (the log format aside)."""

    plan_file: Path | None
    auto_approve: bool
    allow_destructive: bool
    prune: bool
    lock_timeout: float
    max_parallel: int
    show_dag: bool


def _spark_starter(project: Project, selected: Sequence[Table]) -> SessionStarter:
    """The Spark application: for a small selection started at once, alongside the plan;
    for a larger one once a plan that needs it is known (`_plan_and_apply`): a saved
    plan's at once, a plan made here once it is made, so a no-op apply of 1,000 tables
    never starts the JVM (its start competed with the plan for the 2 cores: 16.7 s against
    8-10 s for `plan`). A selection of upsert tables only waits for its plan too: a small
    batch of each is read and merged by the driver, with no Spark (`needs_spark`)."""
    from tableflow_core.engine.spark_session import SessionStarter
    from tableflow_core.targets.catalog import spark_catalog_known_before_open
    from tableflow_core.tasks.apply import project_spark_session

    # A REST target's catalog goes in the application's conf: Spark loads it when a task
    # first uses it, and a run whose read tasks write never does (registering it on the
    # running session took 0.4-1.0 s of the 1M peer apply's critical path).
    known = spark_catalog_known_before_open(project)
    catalogs = dict([known]) if known is not None else None
    return SessionStarter(
        lambda: project_spark_session(project, catalogs, short_lived=True),
        start=len(selected) <= EARLY_SPARK_START_MAX_TABLES
        and not all(t.mode == "upsert" for t in selected),
        catalogs=catalogs,
    )


@click.command("apply")
@click.argument("plan_file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--auto-approve", is_flag=True, help="Apply without asking for confirmation.")
@click.option(
    "--allow-destructive", is_flag=True, help="Allow replacing tables (drops their data)."
)
@click.option("--prune", is_flag=True, help="Drop undeclared tables in the project's namespaces.")
@click.option(
    "--lock-timeout",
    type=float,
    default=0.0,
    show_default=True,
    help="Seconds to wait for another apply holding the same tables.",
)
@click.option(
    "--max-parallel",
    type=int,
    default=4,
    show_default=True,
    help="Tables processed concurrently in the Spark application.",
)
@click.option("--show-dag", is_flag=True, help="Print the DAG of tasks before running it.")
@log_format_option
@click.pass_obj
def command(ctx: CliContext, log_format: str, **flags: Any) -> None:
    """Apply a saved plan exactly (refused if the world changed since), or plan and apply."""

    from tableflow_core.targets.catalog import open_catalog

    asked = ApplyFlags(**flags)
    ctx.use_log_format(log_format, "apply")
    project = ctx.load_project()
    selected = ctx.selected_tables()
    if selected:
        fail_fast_if_kafka_is_down(ctx)
    spark_starter = _spark_starter(project, selected)
    # One catalog for the plan and the apply (an embedded one is started once).
    with open_catalog(project) as handle:
        results = _plan_and_apply(ctx, project, handle, spark_starter, asked)
    if ctx.events is not None:
        from tableflow_core.cli.events import emit_results

        emit_results(ctx.events, results)
        if results.status != "success":
            raise SystemExit(1)
        return
    for result in results.tables:
        style = {
            "success": "green",
            "no_changes": "green",
            "error": "bold red",
            "skipped": "yellow",
        }[result.status]
        detail = {
            "success": f"{plural(result.records_written, 'record')} written, offsets "
            f"{result.offsets_before} -> {result.offsets_after}",
            "no_changes": "up to date",
        }.get(result.status, result.error or "")
        ctx.console.print(
            f"[{style}]{result.status:>10}[/] {result.table}: {detail}", highlight=False
        )
        ctx.warn(result.warnings)
        for published in result.published:
            ctx.console.print(f"           published {published}", highlight=False)
        if result.delta_version is not None:
            ctx.console.print(
                f"           delta log at version {result.delta_version}", highlight=False
            )
    ctx.console.print(results.summary_line(), highlight=False)
    ctx.console.print("Results written to target/run_results.json", highlight=False)
    if results.status != "success":
        raise SystemExit(1)


def _plan_and_apply(
    ctx: CliContext,
    project: Project,
    handle: CatalogHandle,
    spark_starter: SessionStarter,
    asked: ApplyFlags,
) -> RunResults:
    """Load or make the plan, show it, confirm, apply it (a plan with nothing to do too:
    its results say so, run_results.json is never left from an earlier apply)."""
    from tableflow_core.plan.plan_file import load_plan
    from tableflow_core.tasks.apply import ApplyTask, needs_spark

    plan_file = asked.plan_file
    world = None  # the world a plan made here was read from (no re-read before applying)
    if plan_file is not None:
        plan = load_plan(plan_file)
        if plan.project != project.name or plan.target != project.target_name:
            ctx.fail(
                f"{plan_file} is a plan for project {plan.project} target {plan.target}, "
                f"not {project.name} target {project.target_name}"
            )
        if plan.dag.tasks and needs_spark(plan):
            spark_starter.start()
    else:
        plan, world = run_plan(ctx, asked.allow_destructive, asked.prune, handle)
        if plan.dag.tasks and not plan.blockers and needs_spark(plan):
            spark_starter.start()  # while the plan is printed
    # Reviewed already (a plan file) or not wanted (--auto-approve): one line per table.
    approved = plan_file is not None or asked.auto_approve
    if ctx.events is not None:
        ctx.events.emit(
            "plan",
            summary=plan.summary_line(),
            tables=list(plan.tables),
            blockers=[b.message for b in plan.blockers],
        )
    else:
        show_plan(
            ctx, plan, "compact" if approved and not asked.show_dag else "human", asked.show_dag
        )
    if plan.blockers:
        ctx.fail("the plan is blocked (see above); nothing was changed.")
    if not plan.has_changes:
        ctx.console.print("Nothing to apply.")
    elif plan_file is None and not asked.auto_approve:
        if not sys.stdin.isatty():
            ctx.fail(
                "apply needs confirmation but stdin is not a terminal: "
                "pass --auto-approve, or save a plan with `plan --out FILE` and `apply FILE`."
            )
        if not click.confirm("Apply this plan?", default=False):
            ctx.fail("apply cancelled; nothing was changed.")
        world = None  # time passed while the user read the plan: check it is still current
    return ApplyTask(
        project,
        plan,
        console=ctx.err_console,
        lock_timeout_s=asked.lock_timeout,
        max_parallel=asked.max_parallel,
        spark_starter=spark_starter,
        handle=handle,
        world=world,
    ).run()
