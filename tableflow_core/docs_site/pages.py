"""HTML pages of the docs site (pure: values in, strings out)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from tableflow_core.config.project import Project, Table
from tableflow_core.docs_site.dag import render_svg
from tableflow_core.docs_site.model import (
    Edge,
    Enrichment,
    Graph,
    SchemaInfo,
    config_schema,
    describe_check,
    describe_transform,
)
from tableflow_core.redaction import redact_setting

NONE = "-"
STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 0;
       color: #1d2330; background: #fafbfc; }
header { background: #1d2b45; color: #fff; padding: 14px 28px; }
header a { color: #cfe0ff; } header h1 { margin: 0; font-size: 22px; }
header .meta { font-size: 13px; color: #b8c4da; margin-top: 4px; }
main { padding: 18px 28px 40px; }
h2 { font-size: 17px; margin: 26px 0 10px; border-bottom: 1px solid #dde2ea; padding-bottom: 4px; }
table.grid { border-collapse: collapse; font-size: 14px; background: #fff; width: 100%; }
table.grid th, table.grid td { border: 1px solid #dde2ea; padding: 5px 10px; text-align: left;
       vertical-align: top; }
table.grid th { background: #f0f3f8; }
.num { text-align: right; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 4px 18px; font-size: 14px; }
dl.facts dt { color: #5a6478; } dl.facts dd { margin: 0; }
.note { color: #7a5a00; background: #fff8e1; border: 1px solid #f0dca0; padding: 6px 10px;
        font-size: 13px; margin: 6px 0; }
.dagbox { overflow-x: auto; background: #fff; border: 1px solid #dde2ea; padding: 8px; }
svg.dag { max-width: 100%; height: auto; }
svg.dag text.label { font-size: 14px; font-weight: 600; fill: #1d2330; }
svg.dag text.sub { font-size: 11px; fill: #5a6478; }
svg.dag text.column { font-size: 13px; font-weight: 600; fill: #5a6478; }
svg.dag a:hover rect { stroke-width: 3; }
.state-ok { color: #1e7d3b; } .state-lagging { color: #a66f00; } .state-error { color: #c0392b; }
.state-suspended { color: #8e44ad; } .state-not_created { color: #777; }
.state-unreachable { color: #c0392b; }
code { background: #eef1f6; padding: 1px 4px; border-radius: 3px; }
/* Side by side on a wide window, one under the other on a narrow one. */
.split { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 560px), 1fr));
         gap: 0 36px; align-items: start; }
.split > section > h2:first-child { margin-top: 0; }
"""


def _page(title: str, subtitle: str, body: str, root: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title>"
        f'<link rel="stylesheet" href="{root}style.css"></head><body>'
        f'<header><h1>{escape(title)}</h1><div class="meta">{subtitle}</div></header>'
        f"<main>{body}</main></body></html>\n"
    )


def _grid(
    headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: frozenset[int] = frozenset()
) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    lines = []
    for row in rows:
        cells = "".join(
            f"<td{' class=num' if i in numeric else ''}>{cell}</td>" for i, cell in enumerate(row)
        )
        lines.append(f"<tr>{cells}</tr>")
    if not lines:
        return '<p class="note">none</p>'
    return (
        f'<table class="grid"><thead><tr>{head}</tr></thead><tbody>{"".join(lines)}</tbody></table>'
    )


def _num(value: int | None) -> str:
    return NONE if value is None else f"{value:,}"


def _state(status: Any) -> str:
    if status is None:
        return "unknown"
    text = status.state + (f" ({status.suspended_reason})" if status.suspended_reason else "")
    return f'<span class="state-{escape(status.state)}">{escape(text)}</span>'


def _notes(enrichment: Enrichment) -> str:
    return "".join(f'<p class="note">{escape(n)}</p>' for n in enrichment.notes)


def render_index(
    project: Project, tables: tuple[Table, ...], graph: Graph, enrichment: Enrichment, when: str
) -> str:
    rows = []
    for t in tables:
        status = enrichment.statuses.get(t.name)
        rows.append(
            (
                f'<a href="tables/{escape(t.name)}.html">{escape(t.name)}</a>',
                escape(t.identifier),
                escape(t.topic),
                escape(t.mode),
                escape(", ".join(t.formats)),
                _state(status),
                _num(status.lag if status else None),
                _num(status.rows if status else None),
            )
        )
    body = (
        _notes(enrichment)
        + "<h2>Lineage</h2>"
        + f'<div class="dagbox">{render_svg(graph)}</div>'
        + f"<h2>Tables ({len(tables)})</h2>"
        + _grid(
            ("table", "identifier", "topic", "mode", "formats", "state", "lag", "rows"),
            rows,
            numeric=frozenset({6, 7}),
        )
    )
    subtitle = (
        f"project <b>{escape(project.name)}</b> · target <b>{escape(project.target_name)}</b>"
        f" · generated {escape(when)}"
    )
    return _page(f"{project.name}: tableflow docs", subtitle, body, "")


def _schema_section(table: Table, schema: SchemaInfo | None) -> str:
    schema = schema or config_schema(table)
    if schema is None:
        return (
            '<p class="note">Schema unknown: the table does not exist in the catalog yet and '
            "the schema registry could not be read.</p>"
        )
    rows = [
        (
            escape(c.name),
            f"<code>{escape(c.type)}</code>",
            "yes" if c.required else "",
            escape(c.doc),
        )
        for c in schema.columns
    ]
    return f"<p>From {escape(schema.source)}.</p>" + _grid(
        ("column", "type", "required", "doc"), rows
    )


def _facts(items: Iterable[tuple[str, str]]) -> str:
    return (
        "<dl class=facts>"
        + "".join(f"<dt>{escape(k)}</dt><dd>{v}</dd>" for k, v in items)
        + "</dl>"
    )


def _status_section(status: Any) -> str:
    if status is None:
        return '<p class="note">No live status (catalog or Kafka not reachable, or --offline).</p>'
    run = status.last_run
    dlq = status.dlq
    items = [
        ("state", _state(status)),
        ("lag (records)", _num(status.lag)),
        ("last commit", escape(status.last_commit_at or NONE)),
        ("rows", _num(status.rows)),
        ("data files", _num(status.data_files)),
        ("snapshot", escape(str(status.snapshot_id or NONE))),
        (
            "last run",
            escape(
                f"{run.status}, {run.records_written:,} written"
                + (f": {run.error}" if run.error else "")
            )
            if run
            else NONE,
        ),
        (
            "dead letters",
            escape(
                f"{dlq.target}: {dlq.records if dlq.records is not None else 'not counted'}"
                if dlq
                else NONE
            ),
        ),
    ]
    problems = "".join(f'<p class="note">{escape(p)}</p>' for p in status.problems)
    return _facts(items) + problems


def _subgraph(graph: Graph, table: Table) -> Graph:
    me = f"table:{table.name}"
    edges = tuple(e for e in graph.edges if me in (e.source, e.target))
    ids = {me} | {e.source for e in edges} | {e.target for e in edges}
    nodes = tuple(
        n if n.href is None else type(n)(n.id, n.kind, n.label, n.sublabel, f"../{n.href}")
        for n in graph.nodes
        if n.id in ids
    )
    return Graph(nodes, edges)


def _lineage(table: Table, edges: tuple[Edge, ...]) -> str:
    items = [("reads", f"Kafka topic <code>{escape(table.topic)}</code>")]
    if table.dlq is not None:
        target = table.dlq.topic if table.dlq.type == "kafka" else table.dlq.table
        items.append(("bad records to", f"{table.dlq.type} <code>{escape(target)}</code>"))
    for name in table.publish_to:
        items.append(("published to", f"catalog <code>{escape(name)}</code>"))
    return _facts(items)


def render_table_page(
    project: Project, table: Table, graph: Graph, enrichment: Enrichment, when: str
) -> str:
    status = enrichment.statuses.get(table.name)
    value = table.value
    facts = [
        ("identifier", f"<code>{escape(table.identifier)}</code>"),
        ("topic", f"<code>{escape(table.topic)}</code>"),
        ("mode", escape(table.mode)),
        ("key columns", escape(", ".join(table.key_columns) or NONE)),
        ("value format", escape(value.format + (f" ({value.subject})" if value.subject else ""))),
        ("key format", escape(table.key.format)),
        ("formats", escape(", ".join(table.formats))),
        (
            "start from",
            escape(
                str(
                    table.start_from
                    if isinstance(table.start_from, str)
                    else table.start_from.timestamp
                )
            ),
        ),
        ("refresh interval", escape(table.refresh_interval or f"{table.refresh_interval_s:g}s")),
        ("on error", escape(table.on_error)),
        ("metadata columns", escape(", ".join(table.metadata_columns) or NONE)),
        ("tags", escape(", ".join(table.tags) or NONE)),
        ("defined in", f"<code>{escape(table.source.relative_to(project.root))}</code>"),
    ]
    sub = _subgraph(graph, table)
    overview = (
        (f"<p>{escape(table.description)}</p>" if table.description else "")
        + _facts(facts)
        + "<h2>Last status</h2>"
        + _status_section(status)
    )
    lineage = (
        "<h2>Lineage</h2>"
        + _lineage(table, sub.edges)
        + f'<div class="dagbox">{render_svg(sub)}</div>'
    )
    body = (
        f'<div class="split"><section>{overview}</section><section>{lineage}</section></div>'
        + "<h2>Schema</h2>"
        + _schema_section(table, enrichment.schemas.get(table.name))
        + "<h2>Partitions and sort order</h2>"
        + _grid(
            ("partition",),
            [(f"<code>{escape(p.expression())}</code>",) for p in table.partition_by],
        )
        + _grid(
            ("sort", "direction"),
            [(escape(s.column), escape(s.direction)) for s in table.sort_by],
        )
        + "<h2>Transforms</h2>"
        + _grid(
            ("#", "type", "settings"),
            [
                (str(i + 1), escape(t.type), escape(describe_transform(t)))
                for i, t in enumerate(table.transforms)
            ],
        )
        + "<h2>Checks</h2>"
        + _grid(
            ("type", "severity", "settings"),
            [(escape(c.type), escape(c.severity), escape(describe_check(c))) for c in table.checks],
        )
        + "<h2>Properties</h2>"
        + _grid(
            ("property", "value"),
            [
                (escape(k), escape(redact_setting(k, v)))
                for k, v in sorted(table.properties.items())
            ],
        )
    )
    subtitle = (
        f'<a href="../index.html">{escape(project.name)}</a> · target '
        f"<b>{escape(project.target_name)}</b> · generated {escape(when)}"
    )
    return _page(f"{table.name}", subtitle, body, "../")
