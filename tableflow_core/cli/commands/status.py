"""`tableflow status [--json]`: lag, last commit, rows, last run, DLQ, suspension per table.

Exits 1 when a component a table needs (the broker, the schema registry, the catalog)
cannot be reached: the tables show `unreachable` and the error names the component.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
from rich.table import Table as RichTable

from tableflow_core.cli.context import CliContext

if TYPE_CHECKING:  # the task reads Kafka and the catalog: imported only when run
    from rich.console import Console

    from tableflow_core.tasks.status import ProjectStatus, TableStatus

STATE_STYLE = {
    "ok": "green",
    "lagging": "yellow",
    "suspended": "magenta",
    "not_created": "dim",
    "error": "bold red",
    "unreachable": "bold red",
}
# Wide enough that nothing is cut when the output goes to a file or a pipe.
NON_TTY_WIDTH = 10_000


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s ago"
    if s < 3600:
        return f"{s // 60}m {s % 60}s ago"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m ago"
    return f"{s // 86400}d {s % 86400 // 3600}h ago"


def _last_commit(status: TableStatus) -> str:
    if status.last_commit_at is None:
        return "-"
    return f"{status.last_commit_at}\n{format_age(status.last_commit_age_s)}"


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _last_run(status: TableStatus) -> str:
    run = status.last_run
    if run is None:
        return "-"
    text = f"{run.status} ({run.records_written:,} written)"
    return f"{text}: {run.error}" if run.error else text


def _dlq(status: TableStatus) -> str:
    dlq = status.dlq
    if dlq is None:
        return "-"
    if dlq.records is None:
        return f"{dlq.type} {dlq.target}"
    if not dlq.exists:
        return f"{dlq.target}: none yet"
    stages = ", ".join(f"{k} {v:,}" for k, v in sorted(dlq.by_stage.items()))
    return f"{dlq.target}: {dlq.records:,}" + (f" ({stages})" if stages else "")


def _formats(status: TableStatus) -> str:
    delta = status.delta
    if delta is None:
        return ", ".join(status.formats)
    if not delta.exists:
        return "iceberg, delta (no Delta log yet)"
    return "iceberg, delta" + (
        "" if delta.in_sync else f" (at snapshot {delta.mirrored_snapshot_id})"
    )


def render_status(status: ProjectStatus, console: Console) -> None:
    table = RichTable(
        title=f"{status.project} ({status.target}) at {status.generated_at}", title_justify="left"
    )
    for column, justify in (
        ("table", "left"),
        ("state", "left"),
        ("lag", "right"),
        ("last commit", "left"),
        ("rows", "right"),
        ("files", "right"),
        ("snapshot", "right"),
        ("last run", "left"),
        ("dlq", "left"),
        ("formats", "left"),
    ):
        table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for t in status.tables:
        state = t.state + (f": {t.suspended_reason}" if t.suspended and t.suspended_reason else "")
        if t.unreachable:
            state = f"{t.state}: {', '.join(t.unreachable)}"
        table.add_row(
            f"{t.name}\n[dim]{t.identifier}[/]",
            f"[{STATE_STYLE[t.state]}]{state}[/]",
            _count(t.lag),
            _last_commit(t),
            _count(t.rows),
            _count(t.data_files),
            "-" if t.snapshot_id is None else str(t.snapshot_id),
            _last_run(t),
            _dlq(t),
            _formats(t),
        )
    console.print(table)
    for t in status.tables:
        for problem in t.problems:
            console.print(f"[yellow]{t.name}:[/] {problem}", highlight=False)


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/status.md).")
@click.pass_obj
def command(ctx: CliContext, as_json: bool) -> None:
    """Per table: lag, last commit and its age, rows, files, last run, DLQ, suspension. No Spark."""
    from tableflow_core.tasks.status import StatusTask

    status = StatusTask(ctx.load_project(), ctx.selected_tables()).run()
    if as_json:
        click.echo(status.to_json())
    else:
        console = ctx.console
        if not console.is_terminal:
            from rich.console import Console

            console = Console(width=NON_TTY_WIDTH, no_color=True, highlight=False)
        render_status(status, console)
    if status.unreachable:
        ctx.unreachable("\n".join(status.unreachable), changes=False)
