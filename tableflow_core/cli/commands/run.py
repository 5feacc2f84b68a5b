"""`tableflow run`: refresh tables on their `refresh_interval`, in one Spark application."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING

import click

from tableflow_core.cli.context import CliContext
from tableflow_core.cli.options import log_format_option
from tableflow_core.text import plural

if TYPE_CHECKING:
    from tableflow_core.cli.events import EventLog
    from tableflow_core.config.project import Project, Table
    from tableflow_core.observability.endpoint import RunEndpoint
    from tableflow_core.tasks.maintain import TableMaintenance
    from tableflow_core.tasks.run import CycleReport


@click.command("run")
@click.option("--once", is_flag=True, help="Refresh every selected table once, then exit.")
@click.option(
    "--max-cycles",
    type=click.IntRange(min=1),
    help="Stop after this many refresh cycles of each lane.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    help="Serve Prometheus metrics, /healthz and /readyz on this port (0: a free one); "
    "overrides the target's `metrics.port`. docs/observability.md.",
)
@click.option(
    "--metrics-host",
    help="Address the metrics endpoint binds (default: the target's `metrics.host`, "
    "else 127.0.0.1).",
)
@log_format_option
@click.pass_obj
def command(
    ctx: CliContext,
    once: bool,
    max_cycles: int | None,
    metrics_port: int | None,
    metrics_host: str | None,
    log_format: str,
) -> None:
    """Keep the selected tables fresh: plan and apply each when its refresh_interval is due.

    Destructive changes are never applied here (run `tableflow apply` for those); a
    table that is blocked or fails is reported and retried at its next interval.
    Tables refresh in lanes (docs/production.md): a slow table waits for no other.
    Stops on Ctrl-C or SIGTERM after the current cycles.
    """
    from rich.markup import escape

    from tableflow_core.engine.reader_process import start_reader_for
    from tableflow_core.engine.spark_session import (
        SessionStarter,
        limit_malloc_arenas,
        use_system_arrow_pool,
    )
    from tableflow_core.tasks.apply import project_spark_session
    from tableflow_core.tasks.run import RunTask

    ctx.use_log_format(log_format, "run")
    project = ctx.load_project()
    tables = ctx.selected_tables()
    stop = threading.Event()
    events = ctx.events

    def request_stop(_signum: int, _frame: FrameType | None) -> None:
        if events is not None:
            events.emit("stopping", message="Stopping after the current cycle")
        ctx.err_console.print("Stopping after the current cycle...")
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    def show(report: CycleReport) -> None:
        if events is not None:
            log_cycle(events, report)
            return
        names = ", ".join(report.tables)
        if report.error:
            failed = f"cycle failed[/] ({names})" if report.refreshed else "maintenance failed[/]"
            ctx.console.print(f"[bold red]{failed}: {report.error}", highlight=False)
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
        elif report.refreshed and not report.error and not report.blocked and not report.suspended:
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

    use_system_arrow_pool()
    limit_malloc_arenas()  # before the JVM and its Python workers start
    # The JVM starts while the first cycle plans.
    spark_starter = SessionStarter(lambda: project_spark_session(project, service=True))
    if not once:  # a one-shot run, as `apply`, would start it for nothing (reader_process.py)
        start_reader_for(project, tables)  # ready from a cycle or two on
    endpoint = _metrics_endpoint(ctx, project, tables, metrics_port, metrics_host)
    intervals = ", ".join(f"{t.name} every {t.refresh_interval_s:g}s" for t in tables)
    if events is not None:
        events.emit(
            "run_started",
            tables={t.name: t.refresh_interval_s for t in tables},
            metrics_url=endpoint.server.url if endpoint is not None else None,
        )
    ctx.console.print(f"Refreshing {plural(len(tables), 'table')}: {intervals}", highlight=False)
    if endpoint is not None:
        ctx.console.print(
            f"Metrics at {endpoint.server.url}/metrics (/healthz, /readyz)", highlight=False
        )
    try:
        reports = RunTask(
            project,
            tables,
            spark_factory=spark_starter.get,
            once=once,
            max_cycles=max_cycles,
            stop=stop,
            console=ctx.err_console,
            on_cycle=show,
            observers=(endpoint.observation,) if endpoint is not None else (),
        ).run()
    finally:
        if endpoint is not None:
            endpoint.close()
    if once and not all(report.ok for report in reports):
        raise SystemExit(1)


def _metrics_endpoint(
    ctx: CliContext,
    project: Project,
    tables: tuple[Table, ...],
    port: int | None,
    host: str | None,
) -> RunEndpoint | None:
    """The metrics endpoint when a port is given (option, else the target's `metrics`)."""
    from tableflow_core.observability.endpoint import serve_run_metrics
    from tableflow_core.observability.server import DEFAULT_HOST

    configured = project.target.metrics
    if port is None:
        if configured is None:
            return None
        port = configured.port
    host = host or (configured.host if configured is not None else DEFAULT_HOST)
    try:
        return serve_run_metrics(project, tables, port, host)
    except OSError as exc:
        ctx.fail(f"cannot serve metrics on {host}:{port}: {exc}")


def log_cycle(events: EventLog, report: CycleReport) -> None:
    """A cycle as JSON events: what `show` prints, with the same figures."""
    from tableflow_core.cli.events import emit_results
    from tableflow_core.observability.causes import failure_cause

    if report.error and not report.refreshed:
        events.emit("maintenance_failed", level="error", error=report.error)
    elif report.error:
        events.emit(
            "cycle_failed",
            level="error",
            tables=list(report.tables),
            error=report.error,
            cause=failure_cause(report.error),
        )
    for name in report.blocked:
        events.emit(
            "table_blocked",
            level="warning",
            table=name,
            message=f"run `tableflow plan --select {name}` for why",
        )
    for name, why in sorted(report.suspended.items()):
        events.emit("table_suspended", level="warning", table=name, reason=why)
    if report.results is not None:
        emit_results(events, report.results)
    elif report.refreshed and not report.error and not report.blocked and not report.suspended:
        events.emit("up_to_date", tables=list(report.tables))
    for done in report.maintenance:
        log_maintenance(events, done)


def log_maintenance(events: EventLog, done: TableMaintenance) -> None:
    from tableflow_core.cli.events import operation_fields

    if done.error or done.delta_error:
        events.emit(
            "maintenance_failed", level="error", table=done.table,
            error=done.error or done.delta_error,
        )  # fmt: skip
    for report, deletes_table in ((done.report, False), (done.deletes, True)):
        for op in report.results if report is not None else ():
            level = "info" if op.status == "success" else "error"
            events.emit(
                "maintenance_operation", level=level, table=done.table,
                deletes_table=deletes_table, **operation_fields(op),
            )  # fmt: skip
    if done.published is not None:
        events.emit("published", table=done.table, summary=done.published.summary_line())
