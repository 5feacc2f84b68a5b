"""What the site shows, as plain values built from the project (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tableflow_core.config.project import Project, Table

NodeKind = Literal["topic", "table", "dlq", "catalog"]


@dataclass(frozen=True)
class Node:
    id: str
    kind: NodeKind
    label: str
    sublabel: str = ""
    href: str | None = None  # link from the DAG picture


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    label: str = ""


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    required: bool = False
    doc: str = ""


@dataclass(frozen=True)
class SchemaInfo:
    columns: tuple[Column, ...]
    source: str  # where the schema came from: "catalog (schema 3)", "registry ...", ...


@dataclass(frozen=True)
class Enrichment:
    """State read from the outside world; everything optional."""

    schemas: Mapping[str, SchemaInfo] = field(default_factory=dict)  # by table name
    statuses: Mapping[str, Any] = field(default_factory=dict)  # by table name: TableStatus
    notes: tuple[str, ...] = ()  # what could not be read


def page_name(table: Table) -> str:
    return f"tables/{table.name}.html"


def dlq_label(table: Table) -> tuple[str, str] | None:
    """(node id, label) of the table's dead-letter target."""
    if table.dlq is None:
        return None
    if table.dlq.type == "kafka":
        return f"dlq:kafka:{table.dlq.topic}", table.dlq.topic
    return f"dlq:iceberg:{table.dlq.table}", table.dlq.table


def build_graph(project: Project, tables: tuple[Table, ...]) -> Graph:
    """topics -> tables -> DLQ targets, tables -> published catalogs."""
    nodes: dict[str, Node] = {}
    edges: list[Edge] = []
    catalogs = project.target.publish_catalogs
    for table in tables:
        topic_id = f"topic:{table.topic}"
        nodes.setdefault(topic_id, Node(topic_id, "topic", table.topic, "Kafka topic"))
        table_id = f"table:{table.name}"
        nodes[table_id] = Node(
            table_id, "table", table.name, f"{table.identifier} · {table.mode}", page_name(table)
        )
        edges.append(Edge(topic_id, table_id))
        dlq = dlq_label(table)
        if dlq is not None and table.dlq is not None:
            kind = "Kafka topic" if table.dlq.type == "kafka" else "Iceberg table"
            nodes.setdefault(dlq[0], Node(dlq[0], "dlq", dlq[1], f"dead letters · {kind}"))
            edges.append(Edge(table_id, dlq[0], "bad records"))
        for name in table.publish_to:
            catalog_id = f"catalog:{name}"
            config = catalogs.get(name)
            sub = f"{config.type} catalog" if config is not None else "catalog (not in target)"
            nodes.setdefault(catalog_id, Node(catalog_id, "catalog", name, sub))
            edges.append(Edge(table_id, catalog_id, "published"))
    return Graph(tuple(nodes.values()), tuple(edges))


def config_schema(table: Table) -> SchemaInfo | None:
    """The columns the project itself declares (plain JSON with `columns`)."""
    if table.value.format == "json" and table.value.columns:
        return SchemaInfo(
            tuple(Column(c.name, c.type, doc=c.path or "") for c in table.value.columns),
            "project (json columns)",
        )
    return None


def describe_transform(transform: Any) -> str:
    data = transform.model_dump(exclude={"type"}, exclude_none=True, mode="json")
    data.pop("salt", None)  # a secret, never shown
    return ", ".join(f"{k}={v}" for k, v in data.items())


def describe_check(check: Any) -> str:
    data = check.model_dump(exclude={"type", "severity"}, exclude_none=True, mode="json")
    return ", ".join(f"{k}={v}" for k, v in data.items())
