"""A table (`tables[]`) and the `defaults` every table inherits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, get_args

from pydantic import Field, field_validator, model_validator

from tableflow_core.config.models.base import (
    IDENTIFIER,
    ConfigModel,
    NamespaceName,
    TopicName,
    check_duration,
)
from tableflow_core.config.models.checks import Check
from tableflow_core.config.models.dead_letter import DeadLetterTarget
from tableflow_core.config.models.formats import Format
from tableflow_core.config.models.layout import PartitionField, SortField
from tableflow_core.config.models.maintenance import Maintenance
from tableflow_core.config.models.transforms import Transform
from tableflow_core.config.names import MAX_NAME_LENGTH

# Table properties Spark manages itself and refuses in TBLPROPERTIES.
SPARK_RESERVED_PROPERTIES = frozenset(
    {"provider", "location", "owner", "external", "comment", "is_managed_location"}
)


def check_table_properties(properties: dict[str, str]) -> dict[str, str]:
    reserved = sorted(SPARK_RESERVED_PROPERTIES.intersection(properties))
    if reserved:
        raise ValueError(
            f"table properties {reserved} are reserved by Spark and cannot be set "
            "(use `description` for a table comment; the warehouse decides locations)"
        )
    return properties


OnDataLoss = Literal["fail", "accept"]


class StartFrom(ConfigModel):
    timestamp: str = Field(
        description="ISO-8601 timestamp; reading starts at the first offset at or after it."
    )


# The Kafka record's metadata columns.
KafkaMetadataColumn = Literal["topic", "partition", "offset", "timestamp", "key", "headers"]
# A change event's metadata (`value.envelope: debezium`, docs/cdc.md): its operation, the
# source's commit timestamp, log position and transaction id; read from the event, not the
# record.
CdcMetadataColumn = Literal[
    "cdc_op", "cdc_source_ts", "cdc_lsn", "cdc_tx_id", "cdc_last_commit_lsn"
]
MetadataColumn = Literal[KafkaMetadataColumn, CdcMetadataColumn]
CDC_METADATA_COLUMNS: tuple[CdcMetadataColumn, ...] = get_args(CdcMetadataColumn)
# A mirror (upsert) orders a key's changes by these (docs/cdc.md): always its columns.
CDC_MIRROR_COLUMNS: tuple[MetadataColumn, ...] = ("cdc_last_commit_lsn", "cdc_lsn")
TableFormatName = Literal["iceberg", "delta"]


def check_table_formats(value: list[TableFormatName] | None) -> list[TableFormatName] | None:
    """Iceberg is the table itself (the Delta log mirrors its files), so it is always listed."""
    if value is None:
        return value
    if "iceberg" not in value:
        raise ValueError(
            "formats must include iceberg: the Delta log mirrors the Iceberg table's files, "
            "e.g. `formats: [iceberg, delta]`"
        )
    if len(set(value)) != len(value):
        raise ValueError(f"formats lists a format twice: {value}")
    return value


class TableDefaults(ConfigModel):
    """Values every table inherits unless it sets its own."""

    namespace: NamespaceName = Field(None, description="Default Iceberg namespace (dot-separated).")
    mode: Literal["append", "upsert"] = Field("append", description="Default table mode.")
    value: Format | None = Field(None, description="Default value format.")
    key: Format | None = Field(None, description="Default key format.")
    properties: dict[str, str] = Field(
        default_factory=dict, description="Table properties merged into each table's."
    )
    metadata_columns: list[MetadataColumn] | None = Field(
        None, description="Default metadata columns."
    )
    on_error: Literal["fail", "skip", "dlq"] = Field(
        "fail",
        description="Default error handling for bad records: fail (stop; `run` suspends the "
        "table), skip (count and drop) or dlq (send to the dead-letter target).",
    )
    dlq: DeadLetterTarget | None = Field(
        None, description="Default dead-letter target for tables with on_error (or a check) dlq."
    )
    on_data_loss: OnDataLoss = Field(
        "fail",
        description="Records deleted from the topic (retention) before a table read them: "
        "`fail` (plan shows them, apply fails naming topic, partition and offsets) or "
        "`accept` (apply reads on from the log start and records the loss in the run's "
        "results and the table's commit).",
    )
    refresh_interval: str = Field("5m", description="Default refresh interval.")
    tags: list[str] = Field(default_factory=list, description="Tags added to every table.")
    start_from: Literal["earliest", "latest"] | StartFrom = Field(
        "earliest", description="Default start."
    )
    max_records_per_run: int | None = Field(None, ge=1, description="Default per-run cap.")
    formats: list[TableFormatName] = Field(
        default_factory=lambda: list[TableFormatName](["iceberg"]),
        description="Default table formats: `[iceberg]` or `[iceberg, delta]` (docs/delta.md).",
    )

    _valid_formats = field_validator("formats")(check_table_formats)

    maintenance: Maintenance | None = Field(
        None, description="Default maintenance block; a table's own block overrides it key by key."
    )

    _valid_interval = field_validator("refresh_interval")(check_duration)
    _no_reserved_properties = field_validator("properties")(check_table_properties)

    @model_validator(mode="after")
    def _dlq_target(self) -> TableDefaults:
        if self.on_error == "dlq" and self.dlq is None:
            raise ValueError(
                "defaults.on_error dlq needs a default dead-letter target: add `dlq: {type: "
                "kafka, topic: ...}` or `dlq: {type: iceberg, table: ns.table}` to `defaults`"
            )
        return self


class TableConfig(ConfigModel):
    """One topic materialized as one Iceberg table."""

    name: str = Field(
        pattern=IDENTIFIER,
        max_length=MAX_NAME_LENGTH,
        description="Unique name of this table in the project (used by --select).",
    )
    description: str | None = Field(
        None, description="Free text; becomes the table's `comment` property."
    )
    topic: TopicName = Field(description="Source Kafka topic.")
    namespace: NamespaceName = Field(
        None, description="Iceberg namespace (dot-separated); default from `defaults`."
    )
    table: str | None = Field(
        None,
        pattern=IDENTIFIER,
        max_length=MAX_NAME_LENGTH,
        description="Iceberg table name; default `name`.",
    )
    value: Format | None = Field(
        None, description="Value format; default from `defaults`, else avro."
    )
    key: Format | None = Field(
        None, description="Key format; default from `defaults`, else string."
    )
    mode: Literal["append", "upsert"] | None = Field(
        None, description="append: every record a row; upsert: one row per key, tombstones delete."
    )
    key_columns: list[str] = Field(default_factory=list, description="Upsert key columns.")
    partition_by: list[PartitionField] = Field(default_factory=list, description="Partition spec.")
    sort_by: list[SortField] = Field(default_factory=list, description="Table write order.")
    properties: dict[str, str] = Field(
        default_factory=dict, description="Iceberg table properties."
    )
    metadata_columns: list[MetadataColumn] | None = Field(
        None,
        description="Kafka metadata columns to add: topic, partition, offset, timestamp, key, "
        "headers; for a Debezium envelope also cdc_op, cdc_source_ts, cdc_lsn, cdc_tx_id, "
        "cdc_last_commit_lsn (docs/cdc.md).",
    )
    start_from: Literal["earliest", "latest"] | StartFrom | None = Field(
        None, description="Where a new table starts reading: earliest, latest or {timestamp: ...}."
    )
    max_records_per_run: int | None = Field(
        None, ge=1, description="Cap records per run (backfills)."
    )
    transforms: list[Transform] = Field(default_factory=list, description="Ordered transforms.")
    checks: list[Check] = Field(default_factory=list, description="Data-quality checks.")
    on_error: Literal["fail", "skip", "dlq"] | None = Field(
        None,
        description="What to do with bad records: fail, skip or dlq (default from `defaults`).",
    )
    on_data_loss: OnDataLoss | None = Field(
        None,
        description="Records deleted from the topic before this table read them: `fail` or "
        "`accept` (default from `defaults`; docs/plan-and-apply.md).",
    )
    dlq: DeadLetterTarget | None = Field(
        None,
        description="Dead-letter target (`{type: kafka, topic: ...}` or `{type: iceberg, "
        "table: ns.table}`) for on_error dlq and checks with on_failure dlq; default from "
        "`defaults`.",
    )
    refresh_interval: str | None = Field(
        None, description="How often `tableflow run` refreshes it, e.g. `5m`."
    )
    publish_to: list[str] = Field(
        default_factory=list, description="Names from the target's `publish_catalogs`."
    )
    maintenance: Maintenance | None = Field(
        None,
        description="Compaction, snapshot expiry, orphan removal, delete and manifest rewrites, "
        "and how often (`tableflow maintain`); keys override `defaults.maintenance`.",
    )
    tags: list[str] = Field(default_factory=list, description="Tags for --select.")
    formats: list[TableFormatName] | None = Field(
        None,
        description="Table formats to maintain: `[iceberg]` or `[iceberg, delta]`; `delta` writes "
        "a Delta log over the same Parquet files after every commit (docs/delta.md). "
        "Default from `defaults`.",
    )

    _valid_formats = field_validator("formats")(check_table_formats)
    _valid_interval = field_validator("refresh_interval")(check_duration)
    _no_reserved_properties = field_validator("properties")(check_table_properties)

    @model_validator(mode="after")
    def _mode_consistency(self) -> TableConfig:
        if self.mode == "upsert" and not self.key_columns:
            raise ValueError("mode upsert needs key_columns")
        if self.mode != "upsert" and self.key_columns:
            raise ValueError("key_columns only apply to mode upsert")
        if self.key is not None and self.key.envelope is not None:
            raise ValueError("envelope applies to the value, not the key")
        # on_error dlq without a `dlq` here may inherit `defaults.dlq`: the loader checks
        # the resolved table (config/loader.py, _dead_letter_problems).
        return self


def needs_dead_letter_target(on_error: str, checks: Sequence[Any]) -> str | None:
    """The key that routes bad records to a dead-letter target, if any ("on_error", "checks")."""
    if on_error == "dlq":
        return "on_error"
    if any(getattr(check, "on_failure", None) == "dlq" for check in checks):
        return "checks"
    return None
