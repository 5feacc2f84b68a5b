"""One table's whole apply step: make the table fit the schema, plan offsets, ingest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tableflow_core.engine.ddl import (
    SchemaEvolutionError,
    apply_schema_changes,
    create_table,
    target_arrow_schema,
)
from tableflow_core.engine.ingest import DecoderFactory, IngestOutcome, ingest
from tableflow_core.engine.schema_compare import diff_table_schema
from tableflow_core.engine.table_state import read_table_state, table_exists
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.kafka.admin import get_watermarks, offsets_for_timestamp
from tableflow_core.kafka.offsets import OffsetPlan, plan_offsets

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def ensure_table(spark: SparkSession, spec: IngestSpec) -> list[str]:
    """Create the table, or evolve it to the spec's target schema. Returns the DDL applied."""
    desired = target_arrow_schema(spec)
    if not table_exists(spark, spec.identifier):
        create_table(spark, spec, desired)
        return [f"created {spec.identifier}"]
    from pyspark.sql.pandas.types import to_arrow_schema

    current_arrow: pa.Schema = to_arrow_schema(spark.table(spec.identifier).schema)
    diff = diff_table_schema(current_arrow, desired)
    if diff.incompatible:
        raise SchemaEvolutionError(
            f"table {spec.table_name} ({spec.identifier}) cannot follow the schema of topic "
            f"{spec.topic!r}: {'; '.join(diff.incompatible)}. Nothing was changed or committed."
        )
    apply_schema_changes(spark, spec, diff)
    return [f"{c.kind} {c.path} {c.detail}".strip() for c in diff.changes]


def plan_run(
    spark: SparkSession, spec: IngestSpec, kafka_conf: Mapping[str, str]
) -> tuple[dict[int, int], OffsetPlan]:
    """(committed offsets, plan) for the table as it is now."""
    state = read_table_state(spark, spec.identifier)
    found = state.committed_offsets(spec.topic)
    committed = dict(found.offsets) if found is not None else {}
    watermarks = get_watermarks(kafka_conf, spec.topic)
    for_time = None
    if isinstance(spec.start_from, int) and set(watermarks) - set(committed):
        for_time = offsets_for_timestamp(kafka_conf, spec.topic, spec.start_from)
    plan = plan_offsets(
        spec.topic,
        committed,
        watermarks,
        spec.start_from,
        spec.max_records_per_run,
        spec.max_records_per_task,
        for_time,
    )
    return committed, plan


def materialize(
    spark: SparkSession,
    spec: IngestSpec,
    kafka_conf: Mapping[str, str],
    *,
    decoder_factory: DecoderFactory | None = None,
) -> IngestOutcome:
    """Bring the table up to the topic's high watermark (or the run cap), exactly once."""
    ensure_table(spark, spec)
    committed, plan = plan_run(spark, spec, kafka_conf)
    return ingest(
        spark,
        spec,
        plan.ranges,
        kafka_conf,
        committed,
        start_offsets=plan.start_offsets,
        decoder_factory=decoder_factory,
        warnings=[gap.describe() for gap in plan.gaps],
    )


__all__: list[Any] = ["ensure_table", "materialize", "plan_run"]
