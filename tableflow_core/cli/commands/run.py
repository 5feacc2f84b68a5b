"""`tableflow run`: refresh tables on their `refresh_interval`, in one Spark application."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from tableflow_core.cli.context import CliContext
from tableflow_core.text import plural


@click.command("run")
@click.option("--once", is_flag=True, help="Refresh every selected table once, then exit.")
@click.option(
    "--max-cycles", type=click.IntRange(min=1), help="Stop after this many refresh cycles."
)
@click.pass_obj
def command(ctx: CliContext, once: bool, max_cycles: int | None) -> None:
    """Keep the selected tables fresh: plan and apply each when its refresh_interval is due.

    Destructive changes are never applied here (run `tableflow apply` for those); a
    table that is blocked or fails is reported and retried at its next interval.
    Stops on Ctrl-C or SIGTERM after the current cycle.
    """
    from rich.markup import escape

    from tableflow_core.engine.spark_session import SessionStarter
    from tableflow_core.pipeline.checks.warmup import prepare_checks_engine
    from tableflow_core.tasks.apply import project_spark_session
    from tableflow_core.tasks.run import CycleReport, RunTask

    project = ctx.load_project()
    tables = ctx.selected_tables()
    stop = threading.Event()

    def request_stop(_signum: int, _frame: FrameType | None) -> None:
        ctx.err_console.print("Stopping after the current cycle...")
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    def show(report: CycleReport) -> None:
        names = ", ".join(report.tables)
        if report.error:
            ctx.console.print(
                f"[bold red]cycle failed[/] ({names}): {report.error}", highlight=False
            )
        for name in report.blocked:
            ctx.console.print(
                f"[yellow]blocked[/] {name}: run `tableflow plan --select {name}` for why"
            )
        for name, why in sorted(report.suspended.items()):
            ctx.console.print(f"[bold yellow]suspended[/] {name}: {why}", highlight=False)
        if report.results is not None:
            for table in report.results.tables:
                if table.status == "error" and table.table not in report.suspended:
                    ctx.console.print(
                        f"[bold red]failed[/] {table.table}: {escape(table.error or '')}",
                        highlight=False,
                    )
                if table.warnings:
                    ctx.console.print(f"warnings of {table.table}:", highlight=False)
                    ctx.warn(table.warnings, indent=2)
            ctx.console.print(report.results.summary_line(), highlight=False)
        elif not report.error and not report.blocked and not report.suspended:
            ctx.console.print(f"up to date: {names}", highlight=False)
        for done in report.maintenance:
            if done.error or done.delta_error:
                ctx.console.print(
                    f"[bold red]maintenance failed[/] {done.table}: {done.error or done.delta_error}",
                    highlight=False,
                )
            if done.report is not None:
                ctx.console.print(f"maintained {done.report.summary_line()}", highlight=False)
            for side in (done.deletes, done.dead_letters):
                if side is not None:
                    ctx.console.print(f"maintained {side.summary_line()}", highlight=False)
            if done.published is not None:
                ctx.console.print(f"published {done.published.summary_line()}", highlight=False)

    # The JVM starts while the first cycle plans.
    spark_starter = SessionStarter(lambda: project_spark_session(project))
    prepare_checks_engine(tables)  # great-expectations' import overlaps the JVM start
    intervals = ", ".join(f"{t.name} every {t.refresh_interval_s:g}s" for t in tables)
    ctx.console.print(f"Refreshing {plural(len(tables), 'table')}: {intervals}", highlight=False)
    reports = RunTask(
        project,
        tables,
        spark_factory=spark_starter.get,
        once=once,
        max_cycles=max_cycles,
        stop=stop,
        console=ctx.err_console,
        on_cycle=show,
    ).run()
    if once and not all(report.ok for report in reports):
        raise SystemExit(1)
