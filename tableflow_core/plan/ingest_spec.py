"""A project table -> the engine's IngestSpec, from the same desired shape `plan` used."""

from __future__ import annotations

from typing import Any

from tableflow_core.config.project import Project, Table
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.ingest.stages import Stage, table_stages
from tableflow_core.plan.compiled import compile_table
from tableflow_core.plan.desired import format_spec, start_from_value
from tableflow_core.plan.shape import desired_shape
from tableflow_core.schemas.decoding import DecoderSpec, serialize_schema
from tableflow_core.targets.registry import registry_settings


def ingest_spec(
    project: Project,
    table: Table,
    resolved: Any,
    catalog: str,
    stages: tuple[Stage, ...] = (),
    key_schema: Any = None,
) -> IngestSpec:
    """`resolved`: the topic's ResolvedSchema; `stages`: the plan's (default: the table's);
    `key_schema`: an upsert table's registry key schema (WorldState.key_schemas)."""

    shape = desired_shape(table, resolved, key_schema)
    decoder = DecoderSpec(
        topic=table.topic,
        value=format_spec(table.value),
        key=format_spec(table.key),
        metadata_columns=table.metadata_columns,
        registry=registry_settings(project.target.schema_registry),
        target_schema_ipc=serialize_schema(shape.decoded_schema or shape.schema),
    )
    return IngestSpec(
        table_name=table.name,
        catalog=catalog,
        namespace=table.namespace,
        table=table.table,
        topic=table.topic,
        decoder=decoder,
        partition_by=shape.partition_by,
        sort_by=shape.sort_by,
        properties=tuple(sorted(shape.properties.items())),
        start_from=start_from_value(table),
        max_records_per_run=table.max_records_per_run,
        mode=shape.mode,
        key_columns=shape.key_columns,
        stages=stages or table_stages(table),
        dead_letter=table.dlq,
        compiled=_compiled(table, shape.decoded_schema),
    )


def _compiled(table: Table, decoded_schema: Any) -> Any:
    """The table's transforms and checks, compiled as plan compiled them (None: neither)."""
    if not (table.transforms or table.checks) or decoded_schema is None:
        return None

    return compile_table(table, decoded_schema)
