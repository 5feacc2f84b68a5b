"""A table's IngestSpec, as the plan's ingest action carries it (pure).

Built from the table's config, its desired shape for the write (`plan/shape.py`: the
topic's schema with the columns the table keeps) and its compiled transforms and checks
(`plan/compiled.py`). Its stages say where each step runs for this run
(`ingest/placement.py`): apply runs the spec as it is.
"""

from __future__ import annotations

from tableflow_core.config.models.dead_letter import DeadLetterPayload
from tableflow_core.config.project import Table
from tableflow_core.ingest.compiled import CompiledTable
from tableflow_core.ingest.placement import Placement, place
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.ingest.stages import (
    Check,
    Decode,
    Publish,
    ReadRanges,
    RouteBadRecords,
    Stage,
    StepLine,
    Transform,
    Write,
)
from tableflow_core.plan.desired import format_spec, start_from_value
from tableflow_core.plan.shape import TableShape
from tableflow_core.transforms.compile import MaskStep, TransformStep


def ingest_spec(
    table: Table, shape: TableShape, compiled: CompiledTable | None, records: int
) -> IngestSpec:
    """The spec of a run of `records` records of `table` (`shape`: its write shape;
    `compiled`: its transforms and checks compiled over `shape.decoded_schema`)."""
    placement = place(
        compiled.transforms if compiled is not None else None,
        compiled.checks if compiled is not None else None,
        mode=shape.mode,
        key_columns=shape.key_columns,
        records=records,
    )
    return IngestSpec(
        table_name=table.name,
        namespace=table.namespace,
        table=table.table,
        topic=table.topic,
        value=format_spec(table.value),
        key=format_spec(table.key),
        metadata_columns=table.metadata_columns,
        decoded_schema=shape.decoded_schema or shape.schema,
        partition_by=shape.partition_by,
        sort_by=shape.sort_by,
        properties=dict(sorted(shape.properties.items())),
        start_from=start_from_value(table),
        max_records_per_run=table.max_records_per_run,
        mode=shape.mode,
        key_columns=shape.key_columns,
        stages=ingest_stages(table, compiled, placement),
        dead_letter=table.dlq,
        dead_letter_payload=dead_letter_payload(table, compiled),
        compiled=compiled,
    )


def dead_letter_text(table: Table, compiled: CompiledTable | None) -> str | None:
    """Where the table's bad records go under `on_error: dlq` (and what a masked payload
    keeps), as plan shows it; None: not dead-lettered."""
    dlq = table.dlq
    if table.on_error != "dlq" or dlq is None:
        return None
    where = f"kafka topic {dlq.topic}" if dlq.type == "kafka" else f"iceberg table {dlq.table}"
    if dead_letter_payload(table, compiled) == "masked":
        return f"{where} (payload masked: no key or value bytes)"
    return where


def dead_letter_payload(table: Table, compiled: CompiledTable | None) -> DeadLetterPayload:
    """What the table's dead-letter rows keep: as declared (`dlq.payload`), else `masked`
    when the table masks a column (a dead-letter target holding their clear values would
    undo the masks) and `raw` otherwise."""
    if table.dlq is not None and table.dlq.payload is not None:
        return table.dlq.payload
    return "masked" if masks_columns(compiled) else "raw"


def masks_columns(compiled: CompiledTable | None) -> bool:
    return compiled is not None and any(
        isinstance(step, MaskStep) for step in compiled.transforms.steps
    )


def ingest_stages(
    table: Table, compiled: CompiledTable | None, placement: Placement = Placement()
) -> tuple[Stage, ...]:
    """The stages of one run of the table, in order, each showing what runs in it."""
    upsert = table.mode == "upsert"
    stages: list[Stage] = [
        ReadRanges(),
        Decode(
            value_format=table.value.format,
            key_format=table.key.format if upsert else None,
            fused=_fused(placement),
        ),
    ]
    if compiled is not None and table.transforms:
        in_spark = [s for s in placement.in_spark if s is not placement.read_task_dedup]
        stages.append(Transform(steps=tuple(_line(step) for step in in_spark)))
    if compiled is not None and table.checks:
        checks = compiled.checks.checks
        stages.append(Check(checks=tuple(StepLine(kind=c.kind, text=c.describe()) for c in checks)))
    stages.append(
        RouteBadRecords(on_error=table.on_error, dead_letter=dead_letter_text(table, compiled))
    )
    stages.append(Write(mode=table.mode, key_columns=table.key_columns))
    stages.append(Publish())
    return tuple(stages)


def _line(step: TransformStep) -> StepLine:
    return StepLine(kind=step.kind, text=step.describe())


def _fused(placement: Placement) -> tuple[StepLine, ...]:
    """The steps that run inside the read tasks, as `plan` shows them."""
    lines = [
        StepLine(
            kind="mask", text=f"{mask.describe()} (while decoding: no clear value reaches Spark)"
        )
        for mask in placement.at_decode
    ]
    dedup = placement.read_task_dedup
    if dedup is not None:
        lines.append(
            StepLine(
                kind="dedup",
                text=f"{dedup.describe()} (in the read tasks; in Spark's shuffle instead when "
                "two read tasks kept one key, in this run or the table's last)",
            )
        )
    lines.extend(
        StepLine(
            kind="unique",
            text=f"unique({', '.join(columns)}): keys reported by the read tasks (none "
            "repeated proves the check without Spark's window)",
        )
        for columns in placement.unique_in_read_tasks
    )
    return tuple(lines)
