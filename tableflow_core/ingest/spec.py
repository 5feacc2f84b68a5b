"""IngestSpec: everything the engine needs to run one table's pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tableflow_core.ingest.stages import Mode, Stage
from tableflow_core.ingest.terms import PartitionTerm, SortTerm
from tableflow_core.kafka.offsets import StartFrom
from tableflow_core.sql_text import quote_ident

if TYPE_CHECKING:
    from tableflow_core.schemas.decoding import DecoderSpec

# Written on every table we create, unless the project overrides them.
DEFAULT_TABLE_PROPERTIES: dict[str, str] = {
    "format-version": "2",
    "write.format.default": "parquet",
    "write.parquet.compression-codec": "zstd",
}

# One representation of partition and sort terms (ingest/terms.py); DDL uses these names.
PartitionFieldSpec = PartitionTerm
SortFieldSpec = SortTerm


@dataclass(frozen=True)
class IngestSpec:
    table_name: str  # the project's logical table name
    catalog: str  # Spark catalog name, e.g. "tableflow"
    namespace: tuple[str, ...]
    table: str
    topic: str
    decoder: DecoderSpec | Any
    partition_by: tuple[PartitionTerm, ...] = ()
    sort_by: tuple[SortTerm, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()
    start_from: StartFrom = "earliest"
    max_records_per_run: int | None = None
    max_records_per_task: int = 250_000
    # Messages decoded per call to the decoder inside a task: 10k keeps a task's Python
    # memory ~55 MB lower than 50k at the same CPU per record (docs/performance.md).
    decode_chunk_size: int = field(default=10_000)
    mode: Mode = "append"
    key_columns: tuple[str, ...] = ()
    # The pipeline the plan emitted (ingest/stages.py); () = the default append pipeline.
    stages: tuple[Stage, ...] = ()
    # The table's dead-letter target config (KafkaDeadLetter / IcebergDeadLetter), if any.
    dead_letter: Any = None
    # The table's transforms and checks (plan/compiled.py CompiledTable); None: neither.
    compiled: Any = None

    @property
    def identifier(self) -> str:
        """The Spark SQL identifier, quoted: `cat`.`ns`.`table`."""
        return ".".join(quote_ident(part) for part in (self.catalog, *self.namespace, self.table))

    def table_schema(self) -> Any:
        """The table's columns (pa.Schema): the decoded record's, or after the transforms."""
        if self.compiled is not None:
            return self.compiled.output_schema
        return self.decoder.target_schema

    def table_properties(self) -> dict[str, str]:
        return {**DEFAULT_TABLE_PROPERTIES, **dict(self.properties)}
