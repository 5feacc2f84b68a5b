"""`tableflow docs generate`: the site from the project alone, looked at in a real browser."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from click.testing import CliRunner

from tableflow_core.cli.main import cli
from tableflow_core.config.loader import load_project
from tableflow_core.docs_site.dag import layout
from tableflow_core.docs_site.model import build_graph

TABLES = [
    {
        "name": "orders",
        "topic": "shop.orders",
        "description": "Every order placed in the shop.",
        "partition_by": ["day(created_at)"],
        "sort_by": ["created_at desc"],
        "transforms": [
            {"type": "mask", "columns": ["email"], "salt": "very-secret-salt"},
            {"type": "filter", "where": "status <> 'TEST'"},
        ],
        "checks": [{"type": "not_null", "columns": ["order_id"]}],
        "on_error": "dlq",
        "dlq": {"type": "iceberg", "table": "shop.dead_letters"},
        "publish_to": ["analytics"],
        "formats": ["iceberg", "delta"],
    },
    {
        "name": "customers",
        "topic": "shop.customers",
        "mode": "upsert",
        "key_columns": ["customer_id"],
        "dlq": {"type": "iceberg", "table": "shop.dead_letters"},
        "publish_to": ["analytics", "partners"],
    },
    {
        "name": "clicks",
        "topic": "web.clicks",
        "value": {
            "format": "json",
            "columns": [{"name": "url", "type": "string"}, {"name": "ms", "type": "long"}],
        },
        "on_error": "dlq",
        "dlq": {"type": "kafka", "topic": "web.clicks.dlq"},
    },
]


def write_docs_project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    catalog = {"type": "rest", "uri": "http://127.0.0.1:1/catalog"}
    project = {
        "name": "shop",
        "targets": {
            "dev": {
                "kafka": {"bootstrap_servers": "127.0.0.1:1"},
                "schema_registry": {"url": "http://127.0.0.1:1"},
                "catalog": {"type": "embedded", "warehouse": "./wh"},
                "publish_catalogs": {"analytics": catalog, "partners": catalog},
            }
        },
        "defaults": {"namespace": "shop"},
    }
    (root / "tableflow_project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
    (root / "tables").mkdir(exist_ok=True)
    (root / "tables" / "shop.yml").write_text(yaml.safe_dump({"tables": TABLES}, sort_keys=False))
    return root


def test_graph_and_layout_are_layered(tmp_path: Path) -> None:
    project = load_project(write_docs_project(tmp_path / "p"))
    graph = build_graph(project, project.tables)
    kinds = sorted({n.kind for n in graph.nodes})
    assert kinds == ["catalog", "dlq", "table", "topic"]
    assert len([n for n in graph.nodes if n.kind == "dlq"]) == 2  # the shared table counts once
    assert len(graph.edges) == 3 + 3 + 3  # topic->table, table->dlq, table->catalog
    placed, width, _height = layout(graph)
    x_of = {p.node.kind: p.x for p in placed}
    assert x_of["topic"] < x_of["table"] < x_of["dlq"] < x_of["catalog"] < width
    boxes = {(p.x, p.y) for p in placed}
    assert len(boxes) == len(placed)  # no two nodes on the same spot


def test_generate_offline_writes_a_page_per_table(tmp_path: Path) -> None:
    root = write_docs_project(tmp_path / "p")
    outcome = CliRunner().invoke(cli, ["--project-dir", str(root), "docs", "generate", "--offline"])
    assert outcome.exit_code == 0, outcome.output
    site = root / "target" / "docs"
    index = (site / "index.html").read_text()
    for name in (
        "orders",
        "customers",
        "clicks",
        "shop.dead_letters",
        "web.clicks.dlq",
        "analytics",
    ):
        assert name in index
    assert "<svg" in index and "<script" not in index
    assert not re.search(r'(src|href)="(https?:)?//', index)  # nothing fetched from the network
    orders = (site / "tables" / "orders.html").read_text()
    assert "day(created_at)" in orders and "not_null" in orders and "iceberg, delta" in orders
    assert "status &lt;&gt; &#x27;TEST&#x27;" in orders
    assert "very-secret-salt" not in orders  # a secret is never rendered
    clicks = (site / "tables" / "clicks.html").read_text()
    assert "project (json columns)" in clicks and ">ms<" in clicks
