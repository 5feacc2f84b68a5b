"""The plan as a coloured, Terraform-style diff for a terminal (rich)."""

from __future__ import annotations

from rich.console import Console, Group
from rich.text import Text

from tableflow_core.ingest.sharing import needs_spark_writer
from tableflow_core.maintenance.delete_load import delete_upkeep
from tableflow_core.maintenance.history import metadata_upkeep
from tableflow_core.plan.actions import (
    Blocker,
    ChangePartitionSpec,
    ChangeSortOrder,
    CreateTable,
    CreateTopic,
    EvolveSchema,
    Ingest,
    MaintenanceDue,
    PlanWarning,
    PublishTable,
    ReplaceTable,
    TableDefinition,
    UpdateProperties,
)
from tableflow_core.plan.dag import render_dag
from tableflow_core.plan.dead_letter_table import is_dlq_action
from tableflow_core.plan.plan import Plan
from tableflow_core.text import plural

SYMBOLS = {
    "create": ("+", "green"),
    "update": ("~", "yellow"),
    "replace": ("-/+", "magenta"),
    "delete": ("-", "red"),
    "read": (">", "cyan"),
    "report": ("?", "dim"),
}


def _line(symbol: str, style: str, text: str, indent: int = 0) -> Text:
    line = Text(" " * indent)
    line.append(f"{symbol} ", style=f"bold {style}")
    line.append(text, style=style)
    return line


def action_lines(action: object) -> list[Text]:
    change = getattr(action, "change", "report")
    symbol, style = SYMBOLS[change]
    kind, identifier = getattr(action, "kind", ""), getattr(action, "identifier", "")
    lines: list[Text] = []
    if kind == "create_namespace":
        lines.append(_line(symbol, style, f"namespace {identifier}"))
    elif isinstance(action, TableDefinition):
        verb = "table" if isinstance(action, CreateTable) else "table (replace: drops data)"
        verb = "dead-letter table" if is_dlq_action(action) else verb
        lines.append(_line(symbol, style, f"{verb} {identifier}"))
        if isinstance(action, ReplaceTable):
            for reason in action.reasons:
                lines.append(Text(f"      because {reason}", style=style))
        for column in action.columns:
            required = " not null" if column.required else ""
            lines.append(Text(f"      {column.name}: {column.type}{required}", style=style))
        kept = metadata_upkeep(action.properties)
        if action.deletes_rewrite_budget is not None:
            kept = f"{kept}, {delete_upkeep(action.deletes_rewrite_budget)}"
        lines.append(Text(f"      keeps {kept}", style=style))
        if action.partition_by:
            parts = ", ".join(p.expression() for p in action.partition_by)
            lines.append(Text(f"      partitioned by {parts}", style=style))
        if action.sort_by:
            lines.append(
                Text(
                    f"      sorted by {', '.join(s.expression() for s in action.sort_by)}",
                    style=style,
                )
            )
    elif isinstance(action, CreateTopic):
        lines.append(_line(symbol, style, f"dead-letter topic {identifier}"))
        lines.append(
            Text(
                f"      {plural(action.partitions, 'partition')} (like topic {action.like_topic}), "
                f"broker default replication; for {', '.join(action.used_by)}",
                style=style,
            )
        )
    elif isinstance(action, EvolveSchema):
        lines.append(_line(symbol, style, f"schema of {identifier}"))
        for change_item in action.changes:
            detail = f" ({change_item.detail})" if change_item.detail else ""
            lines.append(Text(f"      {change_item.kind} {change_item.path}{detail}", style=style))
    elif isinstance(action, UpdateProperties):
        lines.append(_line(symbol, style, f"properties of {identifier}"))
        for key, value in action.set.items():
            before = action.previous.get(key)
            shown = f"{before!r} -> {value!r}" if before is not None else f"{value!r} (new)"
            lines.append(Text(f"      {key}: {shown}", style=style))
    elif isinstance(action, ChangePartitionSpec):
        before = ", ".join(p.expression() for p in action.current) or "unpartitioned"
        after = ", ".join(p.expression() for p in action.desired) or "unpartitioned"
        lines.append(_line(symbol, style, f"partition spec of {identifier}: {before} -> {after}"))
    elif isinstance(action, ChangeSortOrder):
        before = ", ".join(s.expression() for s in action.current) or "unsorted"
        after = ", ".join(s.expression() for s in action.desired) or "unsorted"
        lines.append(_line(symbol, style, f"sort order of {identifier}: {before} -> {after}"))
    elif isinstance(action, Ingest):
        lines.append(
            _line(
                symbol,
                style,
                f"ingest {plural(action.records, 'record')} from topic {action.topic} into {identifier}",
            )
        )
        if not action.ranges:
            lines.append(
                Text("      no new records: the run's checks judge its empty batch", style=style)
            )
        key = f" by key ({', '.join(action.key_columns)})" if action.mode == "upsert" else ""
        lines.append(Text(f"      mode {action.mode}{key}", style=style))
        if action.stages:
            stages = " -> ".join(stage.label() for stage in action.stages)
            lines.append(Text(f"      pipeline: {stages}", style=style))
            for stage in action.stages:
                for detail in stage.details():
                    lines.append(Text(f"        {detail}", style=style))
        for p in action.partitions:
            committed = "never read" if p.committed is None else f"committed {p.committed}"
            lines.append(
                Text(
                    f"      partition {p.partition}: {committed}, end {p.high_watermark}, "
                    f"lag {p.lag:,}, reads [{p.start}, {p.read_to})",
                    style=style,
                )
            )
        if action.records < action.pending:
            lines.append(
                Text(
                    f"      capped by max_records_per_run: {action.pending - action.records:,} left for later runs",
                    style=style,
                )
            )
        for check in action.checks:
            lines.append(Text(f"      check {check}", style=style))
        if action.dead_letter:
            lines.append(Text(f"      bad records -> {action.dead_letter}", style=style))
        for warning in action.warnings:
            lines.append(Text(f"      warning: {warning}", style="bold yellow"))
        lines.extend(_records_lost(action))
    elif isinstance(action, PublishTable):
        lines.append(_line(symbol, style, f"publish {identifier} to {', '.join(action.catalogs)}"))
        for detail in action.details:
            lines.append(Text(f"      {detail}", style=style))
    elif isinstance(action, MaintenanceDue):
        lines.append(_line(symbol, style, f"maintenance due on {identifier} (not run by apply)"))
        for operation in action.operations:
            lines.append(Text(f"      {operation}", style=style))
    elif kind == "drop_table":
        lines.append(_line(symbol, style, f"drop table {identifier} (not declared; --prune)"))
    elif kind == "undeclared_table":
        lines.append(
            _line(
                symbol,
                style,
                f"table {identifier} is in the catalog but not in the project (kept; --prune drops it)",
            )
        )
    return lines


def warning_line(warning: PlanWarning) -> Text:
    where = f"{warning.location}: " if warning.location else ""
    table = f"table {warning.table}: " if warning.table else ""
    key = f" [{warning.key}]" if warning.key else ""
    return _line("!", "bold yellow", f"warning: {where}{table}{warning.message}{key}")


def _warnings(plan: Plan) -> list[Text]:
    if not plan.warnings:
        return []
    return [Text("Warnings:", style="bold yellow"), *(warning_line(w) for w in plan.warnings)]


def blocker_line(blocker: Blocker) -> Text:
    where = f"{blocker.location}: " if blocker.location else ""
    table = f"table {blocker.table}: " if blocker.table else ""
    key = f" [{blocker.key}]" if blocker.key else ""
    return _line("!", "bold red", f"{where}{table}{blocker.message}{key}")


def render_human(plan: Plan, console: Console, show_dag: bool = False) -> None:
    out: list[Text] = [
        Text(f"tableflow plan for project {plan.project}, target {plan.target}", style="bold")
    ]
    if not plan.actions and not plan.blockers:
        out.append(
            Text(
                "No changes. The tables are up to date with the project and their topics.",
                style="green",
            )
        )
    groups: dict[str | None, list[object]] = {}
    for action in plan.actions:
        groups.setdefault(action.table, []).append(action)
    jobs = shared_jobs_of(plan)
    for table, actions in groups.items():
        out.append(Text())
        out.append(Text(f"table {table}" if table else "catalog", style="bold underline"))
        for table_action in actions:
            out.extend(action_lines(table_action))
            if isinstance(table_action, Ingest) and table in jobs:
                out.append(Text(f"      {jobs[table]}", style=SYMBOLS["read"][1]))
            elif isinstance(table_action, Ingest) and (why := _checks_on_spark(table_action)):
                out.append(Text(f"      own Spark pipeline: {why}", style=SYMBOLS["read"][1]))
    for name, why in sorted(plan.suspended.items()):
        out.append(Text())
        out.append(Text(f"! {name}: {why}", style="bold yellow"))
    if plan.warnings:
        out.append(Text())
        out.extend(_warnings(plan))
    if plan.blockers:
        out.append(Text())
        out.append(Text("Blocked:", style="bold red"))
        out.extend(blocker_line(blocker) for blocker in _ordered_blockers(plan.blockers))
    if show_dag and plan.dag.tasks:
        out.append(Text())
        out.append(Text("Apply DAG (independent tables run concurrently):", style="bold"))
        out.extend(Text(f"  {dag_line}") for dag_line in render_dag(plan.dag))
    out.append(Text())
    style = "bold red" if plan.blockers else "bold"
    out.append(Text(plan.summary_line(), style=style))
    _print_lines(console, out)


def _checks_on_spark(ingest: Ingest) -> str | None:
    """Why a checked table's run is not judged in a shared job's read tasks (its own
    Spark pipeline runs its checks), when it has checks."""
    compiled = ingest.spec.compiled
    if compiled is None or not compiled.checks.checks:
        return None
    return needs_spark_writer(ingest.spec)


def shared_jobs_of(plan: Plan, compact: bool = False) -> dict[str, str]:
    """For each table whose run is in a job whose read tasks write the data files (a
    shared job, or a large table's job of its own), the line saying so."""
    lines: dict[str, str] = {}
    for task in plan.dag.tasks:
        others = len(task.members) - 1
        job = (
            f"shared Spark job {task.id} with {plural(others, 'other table')}"
            if others
            else f"Spark job {task.id}"
        )
        for member in task.members:
            lines[member.table] = (
                f"in {task.id}"
                if compact
                else f"{job} (data files written by its read tasks; published on its own)"
            )
    return lines


def _print_lines(console: Console, lines: list[Text]) -> None:
    """One print for the whole plan: rich's fixed cost per call (buffer, options, size)
    made 17,000 separate prints (1,000 tables) take 1.4 s, against 0.7 s as one group."""
    console.print(Group(*lines))


def _ordered_blockers(blockers: tuple[Blocker, ...]) -> list[Blocker]:
    """Not-supported first: it wins over destructive (see docs/plan-and-apply.md)."""
    rank = {"not_supported": 0, "invalid": 1, "destructive": 2}
    return sorted(blockers, key=lambda b: rank[b.kind])


def _records_lost(action: Ingest, indent: str = "      ") -> list[Text]:
    """The records the topic deleted before the table read them, and what apply will do
    (shown by `plan` and by the compact plan of `apply --auto-approve` / a plan file)."""
    outcome = (
        "apply reads on from the log start and records the loss (on_data_loss: accept)"
        if action.on_data_loss == "accept"
        else "apply fails unless the table sets `on_data_loss: accept`"
    )
    return [
        Text(f"{indent}records lost: {lost}; {outcome}", style="bold red")
        for lost in action.describe_lost()
    ]


def _compact_action(action: object) -> str:
    if isinstance(action, Ingest):
        return f"ingest {plural(action.records, 'record')}"
    return str(getattr(action, "kind", "")).replace("_", " ")


def render_compact(plan: Plan, console: Console) -> None:
    """What an approved plan will do, one line per table: for `apply PLAN_FILE` and
    `apply --auto-approve`, where the full diff was already reviewed (or not wanted).
    Blockers are always shown in full."""
    out = [
        Text(f"Applying the plan for project {plan.project}, target {plan.target}", style="bold")
    ]
    groups: dict[str | None, list[object]] = {}
    for action in plan.changes:
        groups.setdefault(action.table, []).append(action)
    jobs = shared_jobs_of(plan, compact=True)
    for table, actions in groups.items():
        what = ", ".join(_compact_action(a) for a in actions)
        shared = f" ({jobs[table]})" if table in jobs else ""
        out.append(Text(f"  {table or 'catalog'}: {what}{shared}"))
        for ingest in (a for a in actions if isinstance(a, Ingest)):
            out.extend(_records_lost(ingest, indent="    "))
    out.extend(_warnings(plan))
    if plan.blockers:
        out.append(Text("Blocked:", style="bold red"))
        out.extend(blocker_line(blocker) for blocker in _ordered_blockers(plan.blockers))
    style = "bold red" if plan.blockers else "bold"
    out.append(Text(plan.summary_line(), style=style))
    _print_lines(console, out)
