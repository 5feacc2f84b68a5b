"""What every bad-record sink is: a frame of BAD_RECORD_SCHEMA rows in, counts out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

Outcome = Literal["skipped", "dead_lettered"]


class IcebergTables(Protocol):
    """The driver's pyiceberg access to the run's catalog (given by the pipeline layer,
    which knows its credentials): what an Iceberg dead-letter sink needs to append a small
    batch without Spark (sinks/iceberg_driver_append.py)."""

    def load(self, identifier: str) -> Any:
        """The pyiceberg table, loaded now, with storage credentials that are current."""
        ...

    def write_data_files(self, table: Any, rows: pa.Table) -> list[Any]:
        """`rows` written as data files of `table`, referenced by nothing yet."""
        ...


@dataclass(frozen=True)
class SinkContext:
    """What sinks need from the run: connections and identity."""

    table: str  # the project table the bad records came from
    run_id: str
    kafka_conf: Mapping[str, str] = field(default_factory=dict)  # for Kafka dead-letter topics
    spark_catalog: str = ""  # Spark catalog name of the target, for Iceberg dead-letter tables
    catalog_address: str = ""  # CatalogHandle.address, named when the catalog fails
    # The same catalog through pyiceberg; None: Iceberg dead-letter tables by Spark only.
    iceberg_tables: IcebergTables | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SinkResult:
    """Where the bad records went, per source partition (for the run's accounting)."""

    outcome: Outcome
    destination: str  # e.g. "kafka topic orders-dlq", "iceberg table ops.dlq", "skipped"
    per_partition: dict[int, int]
    write_s: float = 0.0  # seconds writing the destination (an Iceberg table's commit)

    @property
    def total(self) -> int:
        return sum(self.per_partition.values())


class BadRecordSink(Protocol):
    def write(self, bad: DataFrame) -> SinkResult:
        """Route every row of `bad` (BAD_RECORD_SCHEMA); raise if any could not be."""
        ...
