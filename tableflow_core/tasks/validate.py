"""`tableflow validate` and `tableflow compile`: load the project, report it."""

from __future__ import annotations

from typing import Any

from tableflow_core.config.project import Project, Table


def compiled_project(project: Project, tables: tuple[Table, ...]) -> dict[str, Any]:
    """The fully resolved project as JSON-ready data; secrets appear masked."""
    target = project.target.model_dump(mode="json", exclude_none=True)
    return {
        "project": project.name,
        "root": str(project.root),
        "target": project.target_name,
        "target_config": target,
        "vars": project.config.vars,
        "tables": [compiled_table(table) for table in tables],
    }


def compiled_table(table: Table) -> dict[str, Any]:
    def dump(value: Any) -> Any:
        return (
            value.model_dump(mode="json", exclude_none=True)
            if hasattr(value, "model_dump")
            else value
        )

    return {
        "name": table.name,
        "identifier": table.identifier,
        "topic": table.topic,
        "namespace": list(table.namespace),
        "table": table.table,
        "value": dump(table.value),
        "key": dump(table.key),
        "mode": table.mode,
        "key_columns": list(table.key_columns),
        "partition_by": [p.expression() for p in table.partition_by],
        "sort_by": [dump(s) for s in table.sort_by],
        "properties": table.properties,
        "metadata_columns": list(table.metadata_columns),
        "start_from": dump(table.start_from),
        "max_records_per_run": table.max_records_per_run,
        "transforms": [dump(t) for t in table.transforms],
        "checks": [dump(c) for c in table.checks],
        "on_error": table.on_error,
        "dlq": dump(table.dlq),
        "refresh_interval_s": table.refresh_interval_s,
        "publish_to": list(table.publish_to),
        "tags": list(table.tags),
        "description": table.description,
        "source": str(table.source),
    }
