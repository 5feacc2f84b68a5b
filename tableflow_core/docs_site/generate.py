"""Write the site to target/docs/: from the project alone, enriched when the world answers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tableflow_core.config.project import Project, Table
from tableflow_core.docs_site.model import Column, Enrichment, SchemaInfo, build_graph, page_name
from tableflow_core.docs_site.pages import STYLE, render_index, render_table_page
from tableflow_core.output_files import write_text


@dataclass(frozen=True)
class SiteResult:
    out_dir: Path
    index: Path
    pages: tuple[Path, ...]
    notes: tuple[str, ...]


def generate_site(
    project: Project,
    tables: tuple[Table, ...],
    out_dir: Path,
    enrichment: Enrichment | None = None,
    when: str | None = None,
    base: Path | None = None,
) -> SiteResult:
    """Write index.html, style.css and tables/<name>.html under `out_dir`; no symbolic
    link from `base` (default `out_dir`) down to a page is followed."""

    def _write(path: Path, text: str) -> Path:
        return write_text(path, text, base=base or out_dir)

    extra = enrichment or Enrichment(notes=("Built from the project alone (offline).",))
    moment = when or datetime.now(tz=UTC).isoformat(timespec="seconds")
    graph = build_graph(project, tables)
    _write(out_dir / "style.css", STYLE)
    index = _write(out_dir / "index.html", render_index(project, tables, graph, extra, moment))
    pages = tuple(
        _write(out_dir / page_name(t), render_table_page(project, t, graph, extra, moment))
        for t in tables
    )
    return SiteResult(out_dir, index, pages, extra.notes)


# ----------------------------------------------------------------- enrichment (I/O)


def _iceberg_schema(table: Any) -> SchemaInfo:
    schema = table.schema()
    columns = tuple(
        Column(f.name, str(f.field_type), f.required, f.doc or "") for f in schema.fields
    )
    return SchemaInfo(columns, f"the catalog (Iceberg schema {schema.schema_id})")


def _catalog_schemas(project: Project, tables: tuple[Table, ...]) -> dict[str, SchemaInfo]:
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from tableflow_core.targets.catalog import open_catalog

    found: dict[str, SchemaInfo] = {}
    with open_catalog(project) as handle:
        for table in tables:
            try:
                loaded = handle.catalog.load_table((*table.namespace, table.table))
            except (NoSuchTableError, NoSuchNamespaceError):
                continue
            found[table.name] = _iceberg_schema(loaded)
    return found


def _registry_schema(project: Project, table: Table) -> SchemaInfo:
    from tableflow_core.plan.desired import format_spec
    from tableflow_core.schemas.resolve import resolve_schema
    from tableflow_core.targets.registry import registry_settings

    resolved = resolve_schema(
        table.topic,
        format_spec(table.value),
        format_spec(table.key),
        table.metadata_columns,
        registry_settings(project.target.schema_registry),
    )
    columns = tuple(Column(f.name, str(f.type), not f.nullable) for f in resolved.arrow_schema)
    where = (
        f"subject {resolved.subject} v{resolved.registry_version}"
        if resolved.subject
        else "the project"
    )
    return SchemaInfo(columns, f"the schema registry ({where}; table not created yet)")


def read_enrichment(project: Project, tables: tuple[Table, ...]) -> Enrichment:
    """Catalog schemas, live status (status task) and registry schemas, as far as reachable."""
    from tableflow_core.tasks.status import StatusTask

    notes: list[str] = []
    schemas: dict[str, SchemaInfo] = {}
    statuses: dict[str, Any] = {}
    try:
        schemas.update(_catalog_schemas(project, tables))
        status = StatusTask(project, tables).run()
        statuses = {s.name: s for s in status.tables}
    except Exception as exc:
        notes.append(f"Catalog not reachable, no live state: {project.redact(str(exc))}")
    for table in tables:
        if table.name in schemas:
            continue
        try:
            schemas[table.name] = _registry_schema(project, table)
        except Exception as exc:
            notes.append(f"{table.name}: schema not resolved: {project.redact(str(exc))}")
    return Enrichment(schemas=schemas, statuses=statuses, notes=tuple(notes))
