"""IngestSpec: everything the engine needs to materialize one topic into one table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tableflow_core.kafka.offsets import StartFrom

if TYPE_CHECKING:
    from tableflow_core.schemas.decoding import DecoderSpec

Transform = Literal["identity", "bucket", "truncate", "year", "month", "day", "hour"]

# Written on every table we create, unless the project overrides them.
DEFAULT_TABLE_PROPERTIES: dict[str, str] = {
    "format-version": "2",
    "write.format.default": "parquet",
    "write.parquet.compression-codec": "zstd",
}


@dataclass(frozen=True)
class PartitionFieldSpec:
    column: str
    transform: Transform = "identity"
    param: int | None = None  # bucket count N or truncate width W

    def __post_init__(self) -> None:
        needs_param = self.transform in ("bucket", "truncate")
        if needs_param and (self.param is None or self.param <= 0):
            raise ValueError(
                f"partition transform {self.transform} on {self.column!r} needs a positive param"
            )
        if not needs_param and self.param is not None:
            raise ValueError(
                f"partition transform {self.transform} on {self.column!r} takes no param"
            )


@dataclass(frozen=True)
class SortFieldSpec:
    column: str
    descending: bool = False
    nulls_first: bool = True


@dataclass(frozen=True)
class IngestSpec:
    table_name: str  # the project's logical table name
    catalog: str  # Spark catalog name, e.g. "tableflow"
    namespace: tuple[str, ...]
    table: str
    topic: str
    decoder: DecoderSpec | Any
    partition_by: tuple[PartitionFieldSpec, ...] = ()
    sort_by: tuple[SortFieldSpec, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()
    start_from: StartFrom = "earliest"
    max_records_per_run: int | None = None
    max_records_per_task: int = 250_000
    # Messages decoded per call to the decoder inside a task (memory vs. overhead).
    decode_chunk_size: int = field(default=50_000)

    @property
    def identifier(self) -> str:
        """The Spark SQL identifier, quoted: `cat`.`ns`.`table`."""
        return ".".join(quote_ident(part) for part in (self.catalog, *self.namespace, self.table))

    def table_properties(self) -> dict[str, str]:
        return {**DEFAULT_TABLE_PROPERTIES, **dict(self.properties)}


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
