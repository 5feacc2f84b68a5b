"""The plan as Markdown for pull-request comments."""

from __future__ import annotations

from tableflow_core.plan.plan import Plan
from tableflow_core.plan.render_human import (
    SYMBOLS,
    _ordered_blockers,
    action_lines,
    blocker_line,
    warning_line,
)
from tableflow_core.text import plural


def render_markdown(plan: Plan) -> str:
    out = [f"### tableflow plan: `{plan.project}` / target `{plan.target}`", ""]
    s = plan.summary
    status = (
        ":no_entry: blocked"
        if plan.blockers
        else (":pencil2: changes" if plan.has_changes else ":white_check_mark: no changes")
    )
    out.append(f"**{plan.summary_line()}** — {status}")
    out.append("")
    if plan.actions:
        out += ["| | table | action | detail |", "|---|---|---|---|"]
        for action in plan.actions:
            symbol = SYMBOLS[action.change][0]
            detail = _detail(action)
            out.append(
                f"| `{symbol}` | {action.table or ''} | {action.kind} `{action.identifier}` | {detail} |"
            )
        out.append("")
        out += ["<details><summary>Full diff</summary>", "", "```diff"]
        for action in plan.actions:
            for line in action_lines(action):
                out.append(line.plain)
        out += ["```", "", "</details>", ""]
    if plan.warnings:
        out.append("**Warnings**")
        out.append("")
        for warning in plan.warnings:
            out.append(f"- {warning_line(warning).plain[2:]}")
        out.append("")
    if plan.blockers:
        out.append("**Blocked**")
        out.append("")
        for blocker in _ordered_blockers(plan.blockers):
            out.append(f"- {blocker_line(blocker).plain[2:]}")
        out.append("")
    if s.records_to_ingest:
        out.append(
            f"{plural(s.tables_to_ingest, 'table')} to ingest, {plural(s.records_to_ingest, 'record')}."
        )
    return "\n".join(out).rstrip() + "\n"


def _detail(action: object) -> str:
    lines = action_lines(action)
    first = lines[0].plain.split(" ", 1)[1] if lines else ""
    return first.replace("|", "\\|")
