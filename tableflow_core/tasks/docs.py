"""`tableflow docs generate`: the project's static documentation site."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tableflow_core.config.project import Project, Table
from tableflow_core.docs_site.generate import SiteResult, generate_site
from tableflow_core.docs_site.model import Column, Enrichment, SchemaInfo
from tableflow_core.plan.desired import format_spec
from tableflow_core.schemas.resolve import resolve_schema
from tableflow_core.targets.catalog import open_catalog
from tableflow_core.targets.registry import registry_settings
from tableflow_core.tasks.status import StatusTask

DEFAULT_OUT = Path("target") / "docs"


@dataclass
class DocsGenerateTask:
    project: Project
    tables: tuple[Table, ...]
    out_dir: Path | None = None  # default <project>/target/docs
    offline: bool = False  # True: the project alone, no catalog/registry/Kafka reads

    def run(self) -> SiteResult:
        out = self.out_dir or self.project.root / DEFAULT_OUT
        # Under the project (target/docs by default): no link from the root down is followed.
        inside = out.absolute().is_relative_to(self.project.root)
        enrichment = None if self.offline else read_enrichment(self.project, self.tables)
        return generate_site(
            self.project, self.tables, out, enrichment, base=self.project.root if inside else out
        )


# ----------------------------------------------------------------- enrichment (I/O)


def _iceberg_schema(table: Any) -> SchemaInfo:
    schema = table.schema()
    columns = tuple(
        Column(f.name, str(f.field_type), f.required, f.doc or "") for f in schema.fields
    )
    return SchemaInfo(columns, f"the catalog (Iceberg schema {schema.schema_id})")


def _catalog_schemas(project: Project, tables: tuple[Table, ...]) -> dict[str, SchemaInfo]:
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

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
    notes: list[str] = []
    schemas: dict[str, SchemaInfo] = {}
    statuses: dict[str, Any] = {}
    try:
        schemas.update(_catalog_schemas(project, tables))
        status = StatusTask(project, tables).run()
        statuses = {s.name: s for s in status.tables}
        notes.extend(f"No live state from it: {why}" for why in status.unreachable)
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
