"""IngestSpec: everything the engine needs to run one table's pipeline.

`plan` builds it (`plan/ingest_spec.py`) and the ingest action carries it, in the plan
file and `plan --json`: apply runs it without going back to the project. Two things
are not in it, and apply binds them from the target and the project
(`runner/binding.py`): the Spark catalog it writes to and the registry's settings (the
connection, with its credentials), and the secrets of the table's config (a hash mask's
salt: `MaskStep.salted` says there is one).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from tableflow_core.config.models.dead_letter import (
    DeadLetterPayload,
    IcebergDeadLetter,
    KafkaDeadLetter,
)
from tableflow_core.ingest.compiled import CompiledTable
from tableflow_core.ingest.stages import Decode as DecodeStage
from tableflow_core.ingest.stages import Mode, Publish, ReadRanges, RouteBadRecords, Stage, Write
from tableflow_core.ingest.terms import PartitionTerm, SortTerm
from tableflow_core.ingest.upkeep import UPKEEP_TABLE_PROPERTIES
from tableflow_core.kafka.offsets import StartFrom
from tableflow_core.schemas.arrow_json import ArrowSchema
from tableflow_core.schemas.decoding import DecoderSpec, serialize_schema
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.sql_text import quote_ident

# Written on every table we create, unless the project overrides them.
DEFAULT_TABLE_PROPERTIES: dict[str, str] = {
    "format-version": "2",
    "write.format.default": "parquet",
    "write.parquet.compression-codec": "zstd",
    **UPKEEP_TABLE_PROPERTIES,
}

# One representation of partition and sort terms (ingest/terms.py); DDL uses these names.
PartitionFieldSpec = PartitionTerm
SortFieldSpec = SortTerm

DeadLetter = KafkaDeadLetter | IcebergDeadLetter


def default_stages(value_format: str) -> tuple[Stage, ...]:
    """The append pipeline of a table without transforms, checks or dead-letter target."""
    return (
        ReadRanges(),
        DecodeStage(value_format=value_format),
        RouteBadRecords(),
        Write(),
        Publish(),
    )


class IngestSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    table_name: str = Field(description="The project's table name")
    namespace: tuple[str, ...]
    table: str
    topic: str
    value: FormatSpec = Field(description="How the topic's values are encoded")
    key: FormatSpec | None = Field(None, description="How its keys are encoded, if decoded")
    metadata_columns: tuple[str, ...] = ()
    decoded_schema: ArrowSchema = Field(
        description="What the decode stage produces: the table's columns before the "
        "transforms (the topic's schema, with the columns the table keeps that it lost)"
    )
    partition_by: tuple[PartitionTerm, ...] = ()
    sort_by: tuple[SortTerm, ...] = ()
    properties: dict[str, str] = Field(default_factory=dict)
    start_from: StartFrom = "earliest"
    max_records_per_run: int | None = None
    max_records_per_task: int = 250_000
    # Messages decoded per call to the decoder inside a task: 10k keeps a task's Python
    # memory ~55 MB lower than 50k at the same CPU per record (docs/history/performance-rounds.md).
    decode_chunk_size: int = 10_000
    mode: Mode = "append"
    key_columns: tuple[str, ...] = ()
    stages: tuple[Stage, ...] = Field(
        (), description="The table's pipeline, in the order the engine runs it"
    )
    dead_letter: DeadLetter | None = Field(
        None, discriminator="type", description="Where bad records go, if anywhere"
    )
    dead_letter_payload: DeadLetterPayload = Field(
        "raw",
        description="What a dead-lettered row keeps: `raw` bytes, or `masked` (no key or "
        "value bytes; a decoded row as JSON with the table's masks applied)",
    )
    compiled: CompiledTable | None = Field(
        None, description="The table's transforms and checks, compiled (none: neither)"
    )
    # Bound by apply (runner/binding.py), never in a plan: the Spark catalog the table is
    # in, and the registry's connection (with its credentials).
    catalog: str = Field("", exclude=True)
    registry: RegistrySettings | None = Field(None, exclude=True)

    @property
    def identifier(self) -> str:
        """The Spark SQL identifier, quoted: `cat`.`ns`.`table`."""
        return ".".join(quote_ident(part) for part in (self.catalog, *self.namespace, self.table))

    @property
    def decoder(self) -> DecoderSpec:
        """What a read task's decoder is built from (shipped to the executors)."""
        return DecoderSpec(
            topic=self.topic,
            value=self.value,
            key=self.key,
            metadata_columns=self.metadata_columns,
            registry=self.registry,
            target_schema_ipc=serialize_schema(self.decoded_schema),
            masked_columns=self.masked_columns,
        )

    @property
    def masked_columns(self) -> frozenset[str]:
        """Decoded columns a mask of the table hides (their values are never quoted)."""
        if self.compiled is None:
            return frozenset()
        return self.compiled.transforms.sensitive_columns()

    def table_schema(self) -> pa.Schema:
        """The table's columns: the decoded record's, or after the transforms."""
        if self.compiled is not None:
            return self.compiled.output_schema
        return self.decoded_schema

    def table_properties(self) -> dict[str, str]:
        return {**DEFAULT_TABLE_PROPERTIES, **self.properties}

    def run_stages(self) -> tuple[Stage, ...]:
        return self.stages or default_stages(self.value.format)

    def bind(self, **runtime: Any) -> IngestSpec:
        """This spec with what apply binds (`catalog`, `registry`, `compiled` with the
        secrets filled in)."""
        return self.model_copy(update=runtime)
