"""`tableflow maintain`: compaction, snapshot expiry, orphan removal... when due."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from tableflow_core.cli.context import CliContext
from tableflow_core.cli.options import log_format_option
from tableflow_core.config.models.maintenance import MAINTENANCE_OPERATIONS

if TYPE_CHECKING:
    from tableflow_core.cli.events import EventLog
    from tableflow_core.tasks.maintain import TableMaintenance


def _operations(
    _ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> frozenset[str] | None:
    names = {n.strip() for v in value for n in v.split(",") if n.strip()}
    unknown = sorted(names - set(MAINTENANCE_OPERATIONS))
    if unknown:
        raise click.BadParameter(
            f"unknown operation(s) {', '.join(unknown)}; use {', '.join(MAINTENANCE_OPERATIONS)}"
        )
    return frozenset(names) or None


@click.command("maintain")
@click.option(
    "--select",
    "-s",
    "selectors",
    multiple=True,
    help="Table names, globs or tag:NAME (added to the global --select).",
)
@click.option("--dry-run", is_flag=True, help="Show what is due; change nothing (no Spark).")
@click.option("--force", is_flag=True, help="Run every configured operation, due or not.")
@click.option(
    "--only",
    multiple=True,
    callback=_operations,
    help="Only these operations (comma-separated): " + ", ".join(MAINTENANCE_OPERATIONS) + ".",
)
@click.option(
    "--lock-timeout",
    type=float,
    default=0.0,
    show_default=True,
    help="Seconds to wait for an apply or run holding a table.",
)
@log_format_option
@click.pass_obj
def command(
    ctx: CliContext,
    selectors: tuple[str, ...],
    dry_run: bool,
    force: bool,
    only: frozenset[str] | None,
    lock_timeout: float,
    log_format: str,
) -> None:
    """Run the maintenance that is due on the selected tables (their `maintenance:` block).

    Each table is maintained under its lock, so it never races an apply or run of the
    same table from this project. Exit 1 if any operation failed.
    """
    from tableflow_core.tasks.maintain import (
        NO_BLOCK,
        MaintainTask,
        how_to_add_maintenance,
    )

    ctx.use_log_format(log_format, "maintain")
    ctx.selectors = (*ctx.selectors, *selectors)
    project = ctx.load_project()
    tables = ctx.selected_tables()

    def show(result: TableMaintenance) -> None:
        if ctx.events is not None:
            log_table(ctx.events, result)
            return
        if result.error:
            ctx.console.print(
                f"[bold red]failed[/] {result.table}: {result.error}", highlight=False
            )
            return
        if result.note and not result.due:
            ctx.console.print(f"{result.table}: {result.note}", highlight=False)
            if result.keeps:
                ctx.console.print(f"  keeps {result.keeps}", highlight=False)
            return
        if result.report is None:
            for due in result.due:
                ctx.console.print(f"due: {due.describe()}", highlight=False)
            if result.keeps:
                ctx.console.print(f"  {result.table} keeps {result.keeps}", highlight=False)
            return
        for op in result.report.results:
            colour = "green" if op.status == "success" else "bold red"
            ctx.console.print(f"[{colour}]{result.table}[/] {op.describe()}", highlight=False)
        for side, what in ((result.deletes, "deletes"), (result.dead_letters, "dead-letter")):
            for op in side.results if side is not None else ():
                colour = "green" if op.status == "success" else "bold red"
                where = f"{result.table} (its {what} table)"
                ctx.console.print(f"[{colour}]{where}[/] {op.describe()}", highlight=False)
        if result.published is not None:
            ctx.console.print(f"published {result.published.summary_line()}", highlight=False)

    results = MaintainTask(
        project,
        tables,
        dry_run=dry_run,
        force=force,
        only=only,
        lock_timeout_s=lock_timeout,
        console=ctx.err_console,
        on_table=show,
    ).run()
    without = {r.table for r in results if r.note and r.note.startswith(NO_BLOCK)}
    if without:
        hint = how_to_add_maintenance(project, tuple(t for t in tables if t.name in without))
        if ctx.events is not None:
            ctx.events.emit("hint", tables=sorted(without), message=hint)
        ctx.console.print(hint, highlight=False, markup=False)
    if not all(r.ok for r in results):
        raise SystemExit(1)


def log_table(events: EventLog, result: TableMaintenance) -> None:
    """One table's maintenance as JSON events: what `show` prints, with its figures."""
    from tableflow_core.cli.commands.run import log_maintenance

    if result.error:
        events.emit("maintenance_failed", level="error", table=result.table, error=result.error)
        return
    if result.report is None:
        if result.due:
            for due in result.due:
                events.emit("maintenance_due", table=result.table, message=due.describe())
        else:
            events.emit("maintenance_skipped", table=result.table, message=result.note)
        return
    log_maintenance(events, result)
