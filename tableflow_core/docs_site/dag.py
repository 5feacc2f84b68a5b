"""Lay the lineage graph out in columns and draw it as inline SVG (pure, no JS)."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from tableflow_core.docs_site.model import Graph, Node, NodeKind

COLUMNS: tuple[tuple[NodeKind, str], ...] = (
    ("topic", "Kafka topics"),
    ("table", "Iceberg tables"),
    ("dlq", "Dead-letter targets"),
    ("catalog", "Published to catalogs"),
)
NODE_W, NODE_H, GAP_Y, COL_W, TOP, LEFT = 230, 54, 22, 320, 56, 20
MAX_LABEL = 30
FILL = {"topic": "#fff4e0", "table": "#e3f0ff", "dlq": "#ffe6e6", "catalog": "#e8f7ec"}
STROKE = {"topic": "#c98a1b", "table": "#2f6fb5", "dlq": "#c0392b", "catalog": "#2e8b57"}


@dataclass(frozen=True)
class Placed:
    node: Node
    x: float
    y: float


def _order(graph: Graph) -> dict[NodeKind, list[Node]]:
    """Tables in project order; every other node at the mean position of its tables."""
    tables = [n for n in graph.nodes if n.kind == "table"]
    rank = {n.id: i for i, n in enumerate(tables)}
    linked: dict[str, list[int]] = {}
    for edge in graph.edges:
        for this, other in ((edge.source, edge.target), (edge.target, edge.source)):
            if other in rank:
                linked.setdefault(this, []).append(rank[other])
    columns: dict[NodeKind, list[Node]] = {kind: [] for kind, _ in COLUMNS}
    for node in graph.nodes:
        columns[node.kind].append(node)
    for kind, nodes in columns.items():
        if kind != "table":
            nodes.sort(
                key=lambda n: (sum(linked.get(n.id, [0])) / len(linked.get(n.id, [0])), n.label)
            )
    return columns


def layout(graph: Graph) -> tuple[list[Placed], float, float]:
    """Positions of every node; the picture's width and height."""
    columns = _order(graph)
    used = [kind for kind, _ in COLUMNS if columns[kind]]
    tallest = max((len(columns[k]) for k in used), default=0)
    height = TOP + max(tallest, 1) * (NODE_H + GAP_Y) + GAP_Y
    placed: list[Placed] = []
    for index, kind in enumerate(used):
        nodes = columns[kind]
        block = len(nodes) * (NODE_H + GAP_Y) - GAP_Y
        start = TOP + (height - TOP - GAP_Y - block) / 2
        x = LEFT + index * COL_W
        placed.extend(Placed(n, x, start + i * (NODE_H + GAP_Y)) for i, n in enumerate(nodes))
    width = LEFT * 2 + max(len(used) - 1, 0) * COL_W + NODE_W
    return placed, width, height


def _short(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def _node_svg(p: Placed) -> str:
    n = p.node
    body = (
        f'<rect x="{p.x:.0f}" y="{p.y:.0f}" width="{NODE_W}" height="{NODE_H}" rx="8" '
        f'fill="{FILL[n.kind]}" stroke="{STROKE[n.kind]}" stroke-width="1.5"/>'
        f'<text x="{p.x + 12:.0f}" y="{p.y + 22:.0f}" class="label">{escape(_short(n.label))}</text>'
        f'<text x="{p.x + 12:.0f}" y="{p.y + 41:.0f}" class="sub">{escape(_short(n.sublabel))}</text>'
        f"<title>{escape(n.label)} ({escape(n.sublabel)})</title>"
    )
    group = f'<g class="node {n.kind}" data-id="{escape(n.id)}">{body}</g>'
    if n.href:
        return f'<a href="{escape(n.href)}">{group}</a>'
    return group


def _gap_y(column_x: float, placed: list[Placed], near: float) -> float:
    """The free horizontal lane in a column closest to `near` (between or around nodes)."""
    tops = sorted(p.y for p in placed if p.x == column_x)
    lanes = [tops[0] - GAP_Y / 2] if tops else [near]
    lanes += [top + NODE_H + GAP_Y / 2 for top in tops]
    return min(lanes, key=lambda lane: abs(lane - near))


def _curve(x1: float, y1: float, x2: float, y2: float) -> str:
    dx = (x2 - x1) / 2
    return f"C {x1 + dx:.0f} {y1:.0f}, {x2 - dx:.0f} {y2:.0f}, {x2:.0f} {y2:.0f}"


def edge_path(a: Placed, b: Placed, columns: list[float], placed: list[Placed]) -> str:
    """From a's right side to b's left side; an edge skipping a column passes through a lane
    between that column's nodes, never behind one (it would read as flowing through it)."""
    x, y = a.x + NODE_W, a.y + NODE_H / 2
    end_y = b.y + NODE_H / 2
    path = [f"M {x:.0f} {y:.0f}"]
    for column_x in (c for c in columns if a.x < c < b.x):
        lane = _gap_y(column_x, placed, (y + end_y) / 2)
        path.append(_curve(x, y, column_x - 12, lane))
        path.append(f"L {column_x + NODE_W + 12:.0f} {lane:.0f}")
        x, y = column_x + NODE_W + 12, lane
    path.append(_curve(x, y, b.x - 2, end_y))
    return " ".join(path)


def render_svg(graph: Graph) -> str:
    """The DAG as an `<svg>` element (links to the table pages)."""
    placed, width, height = layout(graph)
    where = {p.node.id: p for p in placed}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dag" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
        'aria-label="Lineage: topics to tables to dead-letter targets and catalogs">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#777"/></marker></defs>',
    ]
    used = {p.node.kind for p in placed}
    index = 0
    for kind, title in COLUMNS:
        if kind in used:
            x = LEFT + index * COL_W
            parts.append(f'<text x="{x}" y="28" class="column">{escape(title)}</text>')
            index += 1
    columns = sorted({p.x for p in placed})
    for edge in graph.edges:
        a, b = where[edge.source], where[edge.target]
        dashed = ' stroke-dasharray="5 4"' if b.node.kind == "dlq" else ""
        parts.append(
            f'<path class="edge" d="{edge_path(a, b, columns, placed)}" fill="none" '
            f'stroke="#888" stroke-width="1.5"{dashed} marker-end="url(#arrow)"/>'
        )
    parts.extend(_node_svg(p) for p in placed)
    parts.append("</svg>")
    return "".join(parts)
