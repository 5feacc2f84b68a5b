"""Desired (project) vs actual (WorldState) -> Plan. Pure: no I/O, no clock unless given."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tableflow_core.config.errors import ConfigError
from tableflow_core.config.project import Project, SourceLocation, Table
from tableflow_core.deadletter.suspension import describe_suspension
from tableflow_core.ingest.upsert_order import deletes_table
from tableflow_core.kafka.offsets import plan_offsets
from tableflow_core.maintenance.delete_load import budget_of
from tableflow_core.maintenance.schedule import maintenance_due
from tableflow_core.plan import capabilities, column_checks
from tableflow_core.plan.actions import (
    Action,
    Blocker,
    ChangePartitionSpec,
    ChangeSortOrder,
    Column,
    CreateNamespace,
    CreateTable,
    DropTable,
    EvolveSchema,
    Ingest,
    LostOffsets,
    MaintenanceDue,
    OffsetSpan,
    PartitionLag,
    PlanWarning,
    PublishTable,
    ReplaceTable,
    UndeclaredTable,
    UpdateProperties,
)
from tableflow_core.plan.compiled import CompiledTable, compile_table
from tableflow_core.plan.dag import compile_dag
from tableflow_core.plan.dead_letter_table import dlq_table_actions, iceberg_dlq_users
from tableflow_core.plan.dead_letter_topic import dlq_topic_actions
from tableflow_core.plan.desired import comparable_properties, config_hash, start_from_value
from tableflow_core.plan.ingest_spec import dead_letter_text, ingest_spec
from tableflow_core.plan.plan import Plan, PlanOptions, TableFingerprint
from tableflow_core.plan.shape import (
    KEY_PROPERTY,
    MODE_PROPERTY,
    TOPIC_PROPERTY,
    ShapeError,
    TableShape,
    desired_shape,
)
from tableflow_core.plan.source_topic import missing_topic_blocker
from tableflow_core.plan.table_warnings import masked_key_blockers, table_warnings
from tableflow_core.plan.target_warnings import target_warnings
from tableflow_core.plan.type_names import iceberg_type_name
from tableflow_core.plan.world_state import ObservedTable, WorldState, key_arrow_schema
from tableflow_core.publish.state import published_state
from tableflow_core.schemas.evolution import diff_schemas
from tableflow_core.schemas.write_schema import table_write_schema

# (current iceberg schema, desired arrow schema) -> object with .changes and .incompatible
SchemaDiffer = Callable[[Any, Any], Any]
DEFAULT_MAX_RECORDS_PER_TASK = 250_000


def default_schema_differ() -> SchemaDiffer:

    return diff_schemas


def columns_of(arrow_schema: Any) -> tuple[Column, ...]:
    return tuple(
        Column(name=f.name, type=iceberg_type_name(f.type), required=not f.nullable)
        for f in arrow_schema
    )


def build_plan(
    project: Project,
    tables: tuple[Table, ...],
    world: WorldState,
    *,
    options: PlanOptions = PlanOptions(),
    selectors: tuple[str, ...] = (),
    report_undeclared: bool = True,
    schema_differ: SchemaDiffer | None = None,
    now: datetime | None = None,
    tableflow_version: str = "0.1.0",
    max_records_per_task: int = DEFAULT_MAX_RECORDS_PER_TASK,
) -> Plan:
    differ = schema_differ or default_schema_differ()
    actions: list[Action] = []
    blockers: list[Blocker] = list(capabilities.target_blockers(project))
    warnings: list[PlanWarning] = list(target_warnings(project))
    fingerprints: list[TableFingerprint] = []
    planned_namespaces: set[tuple[str, ...]] = set()
    suspended: dict[str, str] = {}

    for table in sorted(tables, key=lambda t: t.name):
        blockers.extend(capabilities.table_blockers(table))
        if table.topic in world.missing_topics:
            blockers.append(missing_topic_blocker(project, table, world.broker_topics))
        for problem in world.problems.get(table.name, ()):
            if not _follows_from_missing_topic(table, problem, world):
                blockers.append(column_checks.problem_blocker(table, problem))
        observed = world.tables.get(table.identifier)
        resolved = world.schemas.get(table.name)
        fingerprints.append(
            table_fingerprint(table, observed, resolved, world.key_schemas.get(table.name))
        )
        why = describe_suspension(observed.properties) if observed is not None else None
        if why is not None:
            suspended[table.name] = why
        if resolved is None:
            if not world.problems.get(table.name):
                blockers.append(
                    Blocker(kind="invalid", table=table.name, message="no schema could be resolved")
                )
            continue
        key_schema = key_arrow_schema(world.key_schemas, table.name)
        try:
            shape = desired_shape(table, resolved, key_schema)
            kept = _kept_shape(table, observed, resolved, key_schema, shape)
        except ConfigError as exc:  # a transform cannot run on this schema
            blockers.extend(_config_blockers(table, exc))
            continue
        except ShapeError as exc:
            blockers.append(Blocker.at(table, "key_columns", "invalid", str(exc)))
            continue
        ns = table.namespace
        if observed is None and ns not in world.namespaces and ns not in planned_namespaces:
            planned_namespaces.add(ns)
            actions.append(
                CreateNamespace(id=f"create_namespace:{'.'.join(ns)}", identifier=".".join(ns))
            )
        table_actions, replaced = _table_changes(table, observed, shape, kept.schema, differ)
        kept_from = None if replaced else observed  # a replaced table keeps no columns
        blockers.extend(column_checks.column_blockers(table, _write_schema(shape, kept_from)))
        actions.extend(table_actions)
        if replaced and not options.allow_destructive:
            reasons = "; ".join(table_actions[0].reasons)  # type: ignore[union-attr]
            blockers.append(
                Blocker(
                    kind="destructive",
                    table=table.name,
                    key=None,
                    location=str(table.source),
                    message=f"replacing the table drops its data ({reasons}); "
                    "pass --allow-destructive to allow it",
                )
            )
        compiled = _compiled(table, shape)
        # What apply writes with: a replaced table keeps none of its columns.
        write_shape = shape if replaced else kept
        if write_shape is not shape and not isinstance(compiled, ConfigError):
            compiled = _compiled(table, write_shape)
        if isinstance(compiled, ConfigError):
            blockers.extend(_config_blockers(table, compiled))
            continue
        decoded = write_shape.decoded_schema or write_shape.schema
        blockers.extend(masked_key_blockers(table, compiled, decoded))
        warnings.extend(table_warnings(table, compiled, decoded, key_schema))
        committed = None if (observed is None or replaced) else observed.committed
        ingest = _ingest_action(
            table, committed, world, max_records_per_task, write_shape, compiled
        )
        if isinstance(ingest, str):
            blockers.append(Blocker(kind="invalid", table=table.name, message=ingest))
        elif ingest is not None:
            actions.append(ingest)
        if observed is not None and not replaced:
            commits = bool(table_actions) or isinstance(ingest, Ingest)
            actions.extend(_publish_action(table, observed, world, commits))
            actions.extend(_maintenance_action(table, observed, now or datetime.now(UTC)))

    dlq_actions, dlq_blockers = dlq_table_actions(
        tables, world.dlq_tables, world.namespaces | planned_namespaces
    )
    actions.extend(dlq_actions)
    blockers.extend(dlq_blockers)
    source_partitions = {name: len(state.watermarks) for name, state in world.topics.items()}
    topic_actions, topic_blockers = dlq_topic_actions(tables, source_partitions, world.dlq_topics)
    actions.extend(topic_actions)
    blockers.extend(topic_blockers)

    if report_undeclared:
        actions.extend(_undeclared(project, world, options))

    plan_tables = tuple(sorted(t.name for t in tables))
    ordered = tuple(actions)
    return Plan(
        tableflow_version=tableflow_version,
        created_at=(now or datetime.now(UTC)).isoformat(),
        project=project.name,
        target=project.target_name,
        config_hash=config_hash(project, tables),
        selectors=selectors,
        options=options,
        tables=plan_tables,
        actions=ordered,
        blockers=tuple(blockers),
        warnings=tuple(warnings),
        fingerprints=tuple(fingerprints),
        dag=compile_dag(ordered, {t.name: t for t in tables}),
        suspended=suspended,
    )


def _follows_from_missing_topic(table: Table, problem: str, world: WorldState) -> bool:
    """A subject named after a topic that does not exist is missing too: the topic's
    blocker says what to do, this one would only repeat it."""
    if table.topic not in world.missing_topics:
        return False
    if problem.startswith("schema:"):
        return table.value.subject is None
    if problem.startswith("key schema:"):
        return table.key.subject is None
    return False


def _write_schema(shape: TableShape, observed: ObservedTable | None) -> Any:

    return table_write_schema(shape.schema, observed.schema if observed else None)


def _kept_shape(
    table: Table,
    observed: ObservedTable | None,
    resolved: Any,
    key_schema: Any,
    shape: TableShape,
) -> TableShape:
    """The shape an existing table is written with: the topic's schema plus the columns
    the table keeps that the topic's schema no longer has (`schemas/write_schema.py`). A
    table with transforms decodes the topic's own schema: its columns are what the
    transforms make of it."""
    if observed is None or table.transforms:
        return shape
    written = table_write_schema(resolved.arrow_schema, observed.schema)
    return desired_shape(table, written, key_schema)


def _table_changes(
    table: Table,
    observed: ObservedTable | None,
    shape: TableShape,
    kept_schema: Any,
    differ: SchemaDiffer,
) -> tuple[list[Action], bool]:
    """The DDL actions of one table and whether they amount to a replace (`kept_schema`:
    the table's columns once its schema changes are applied)."""
    desired_props = shape.properties
    # What a created or a replacing table is made of (CreateTable's and ReplaceTable's fields).
    definition: dict[str, Any] = {
        "columns": columns_of(shape.schema),
        "table_schema": shape.schema,
        "partition_by": shape.partition_by,
        "sort_by": shape.sort_by,
        "properties": desired_props,
        "deletes_rewrite_budget": (
            budget_of(table.maintenance) if shape.mode == "upsert" else None
        ),
    }
    if observed is None:
        return [CreateTable.on_table(table, **definition)], False

    reasons: list[str] = []
    current_topic = observed.properties.get(TOPIC_PROPERTY)
    if current_topic is not None and current_topic != table.topic:
        reasons.append(f"topic {current_topic} -> {table.topic}")
    current_mode = observed.properties.get(MODE_PROPERTY, "append")
    if current_mode != shape.mode:
        reasons.append(f"mode {current_mode} -> {shape.mode}")
    elif shape.mode == "upsert":
        current_key = observed.properties.get(KEY_PROPERTY, "")
        if current_key != ",".join(shape.key_columns):
            wanted = ", ".join(shape.key_columns)
            reasons.append(f"key columns ({current_key.replace(',', ', ')}) -> ({wanted})")
    diff = differ(observed.schema, shape.schema)
    reasons.extend(f"incompatible schema: {reason}" for reason in diff.incompatible)
    if reasons:
        return [ReplaceTable.on_table(table, reasons=tuple(reasons), **definition)], True

    actions: list[Action] = []
    if diff.changes:
        actions.append(EvolveSchema.on_table(table, changes=diff.changes, table_schema=kept_schema))
    current_spec, current_order = tuple(observed.partition_by), tuple(observed.sort_by)
    if shape.partition_by != current_spec:
        actions.append(
            ChangePartitionSpec.on_table(table, current=current_spec, desired=shape.partition_by)
        )
    if shape.sort_by != current_order:
        actions.append(
            ChangeSortOrder.on_table(table, current=current_order, desired=shape.sort_by)
        )
    changed = {
        k: v
        for k, v in comparable_properties(desired_props).items()
        if observed.properties.get(k) != v
    }
    if changed:
        actions.append(
            UpdateProperties.on_table(
                table,
                set=changed,
                previous={k: observed.properties.get(k) for k in changed},
            )
        )
    return actions, False


def _ingest_action(
    table: Table,
    committed: Any,
    world: WorldState,
    max_records_per_task: int,
    shape: TableShape,
    compiled: CompiledTable | None = None,
) -> Ingest | str | None:
    """The ingest action, None when nothing is pending, or a problem text."""

    topic_state = world.topics.get(table.topic)
    if topic_state is None:
        if table.name in world.problems or table.topic in world.missing_topics:
            return None  # blocked already
        return f"topic {table.topic!r} was not read"
    committed_offsets = dict(committed or {})
    offsets = plan_offsets(
        table.topic,
        committed_offsets,
        topic_state.watermarks,
        start_from_value(table),
        table.max_records_per_run,
        max_records_per_task,
        topic_state.offsets_for_time,
    )
    empty_batch_judged = compiled is not None and compiled.checks.judge_empty_batch
    if offsets.total_records == 0 and not offsets.gaps and not empty_batch_judged:
        return None
    read_to = dict(offsets.start_offsets)
    for r in offsets.ranges:
        read_to[r.partition] = max(read_to[r.partition], r.end)
    partitions = tuple(
        PartitionLag(
            partition=p,
            committed=committed_offsets.get(p),
            low_watermark=low,
            high_watermark=high,
            start=offsets.start_offsets[p],
            read_to=read_to[p],
        )
        for p, (low, high) in sorted(topic_state.watermarks.items())
    )
    return Ingest.on_table(
        table,
        topic=table.topic,
        partitions=partitions,
        ranges=tuple(
            OffsetSpan(partition=r.partition, start=r.start, end=r.end) for r in offsets.ranges
        ),
        records=offsets.total_records,
        pending=sum(p.lag for p in partitions),
        checks=tuple(_describe_check(c) for c in table.checks),
        dead_letter=dead_letter_text(table, compiled),
        lost=tuple(
            LostOffsets(partition=g.partition, start=g.start, end=g.end) for g in offsets.gaps
        ),
        on_data_loss=table.on_data_loss,
        spec=ingest_spec(table, shape, compiled, offsets.total_records),
    )


def _publish_action(
    table: Table, observed: ObservedTable, world: WorldState, commits: bool
) -> list[Action]:
    """Missing or stale published pointers, when nothing else commits to the table (a
    commit publishes every catalog of `publish_to` anyway)."""

    if not table.publish_to or commits:
        return []
    error = world.publish_errors.get(table.name)
    catalogs: tuple[str, ...]
    details: tuple[str, ...]
    if error is not None:
        catalogs, details = tuple(table.publish_to), (f"cannot read the pointers: {error}",)
    else:
        pointers = world.published.get(table.name, {})
        stale = [
            s
            for s in published_state(table, observed.metadata_location, pointers)
            if s.needs_publish
        ]
        catalogs, details = tuple(s.catalog for s in stale), tuple(s.describe() for s in stale)
    if not catalogs:
        return []
    return [PublishTable.on_table(table, catalogs=catalogs, details=details)]


def _maintenance_action(table: Table, observed: ObservedTable, now: datetime) -> list[Action]:

    due = maintenance_due(table, observed, now, activity=observed.activity)
    if not due:
        return []
    return [MaintenanceDue.on_table(table, operations=tuple(d.describe(now) for d in due))]


def _compiled(table: Table, shape: TableShape) -> CompiledTable | ConfigError | None:
    """The table's transforms and checks compiled as apply will (pure, no Spark)."""
    if not (table.transforms or table.checks) or shape.decoded_schema is None:
        return None
    try:
        return compile_table(table, shape.decoded_schema)
    except ConfigError as exc:
        return exc


def _config_blockers(table: Table, error: ConfigError) -> list[Blocker]:
    """One blocker per transform or check that cannot run, at its file:line."""
    return [
        Blocker(
            kind="invalid",
            table=table.name,
            key=problem.field_path,
            location=str(SourceLocation(problem.file, problem.line))
            if problem.file is not None
            else str(table.source),
            message=problem.message,
        )
        for problem in error.problems
    ]


def _describe_check(check: Any) -> str:
    target = (
        getattr(check, "columns", None)
        or getattr(check, "column", None)
        or getattr(check, "name", "")
    )
    shown = ", ".join(target) if isinstance(target, list) else str(target)
    return (
        f"{check.type}({shown}) [{check.severity}]" if shown else f"{check.type} [{check.severity}]"
    )


def _undeclared(project: Project, world: WorldState, options: PlanOptions) -> list[Action]:
    declared = {t.identifier for t in project.tables} | set(iceberg_dlq_users(project.tables))
    # An upsert table's deletes table belongs to it (ingest/upsert_order.py).
    declared |= {deletes_table(t.identifier) for t in project.tables if t.mode == "upsert"}
    namespaces = {".".join(t.namespace) for t in project.tables}
    actions: list[Action] = []
    for identifier in sorted(world.listed_tables - declared):
        if identifier.rsplit(".", 1)[0] not in namespaces:
            continue
        if options.prune:
            actions.append(DropTable(id=f"drop_table:{identifier}", identifier=identifier))
        else:
            actions.append(
                UndeclaredTable(id=f"undeclared_table:{identifier}", identifier=identifier)
            )
    return actions


def table_fingerprint(
    table: Table, observed: ObservedTable | None, resolved: Any, key: Any = None
) -> TableFingerprint:
    """What plan (and apply, to refuse a stale plan) sees of a table: the catalog's table,
    the value subject's schema and, for upsert tables with a registry key, the key's."""
    registry: dict[str, Any] = {}
    if resolved is not None:
        registry = {
            "registry_subject": resolved.subject,
            "registry_schema_id": resolved.registry_schema_id,
            "registry_version": resolved.registry_version,
            "schema_fingerprint": resolved.fingerprint,
        }
    if key is not None:
        registry |= {
            "key_registry_subject": key.subject,
            "key_registry_schema_id": key.registry_schema_id,
            "key_registry_version": key.registry_version,
        }
    if observed is None:
        return TableFingerprint(
            table=table.name, identifier=table.identifier, exists=False, **registry
        )
    return TableFingerprint(
        table=table.name,
        identifier=table.identifier,
        exists=True,
        snapshot_id=observed.snapshot_id,
        schema_id=observed.schema_id,
        partition_spec_id=observed.partition_spec_id,
        sort_order_id=observed.sort_order_id,
        metadata_location=observed.metadata_location,
        committed_offsets=dict(observed.committed) if observed.committed is not None else None,
        **registry,
    )
