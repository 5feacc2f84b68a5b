"""How a topic's keys and values are encoded, and the optional Kafka metadata columns."""

from __future__ import annotations

from typing import Literal, get_args

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, field_validator

from tableflow_core.config.models.formats import JsonColumnType
from tableflow_core.config.models.tables import (
    CDC_METADATA_COLUMNS,
    KafkaMetadataColumn,
    MetadataColumn,
)

FormatName = Literal["avro", "json_schema", "protobuf", "json", "connect_json", "string", "bytes"]

REGISTRY_FORMATS: frozenset[str] = frozenset({"avro", "json_schema", "protobuf"})


class JsonColumn(BaseModel):
    """One column extracted from a plain (schemaless) JSON value.

    `path` is a dotted path into the JSON object (default: the column name). Type
    `json` keeps the sub-document as JSON text; `binary` expects base64 text.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    type: JsonColumnType | str = "string"  # also "decimal(P,S)"
    path: str | None = None

    @property
    def json_path(self) -> tuple[str, ...]:
        return tuple((self.path or self.name).split("."))


class FormatSpec(BaseModel):
    """How the keys or the values of a topic are encoded.

    - `subject`: registry subject; default `<topic>-value` / `<topic>-key`.
    - `version`: registry version the table schema follows (`latest` by default).
    - `message`: Protobuf only: the message the records hold (simple or fully-qualified
      name); without it the schema must have exactly one top-level message.
    - `json_columns`: plain `json` only: declared columns. Without them a plain JSON
      value lands as one `value` string column holding the JSON text.
    """

    model_config = ConfigDict(frozen=True)

    format: FormatName
    subject: str | None = None
    version: int | Literal["latest"] = "latest"
    message: str | None = None
    json_columns: tuple[JsonColumn, ...] | None = None
    # `debezium`: each value is a Debezium change event (schemas/debezium.py, docs/cdc.md)
    envelope: Literal["debezium"] | None = None

    @field_validator("json_columns")
    @classmethod
    def _unique_json_columns(
        cls, columns: tuple[JsonColumn, ...] | None
    ) -> tuple[JsonColumn, ...] | None:
        if columns is not None:
            names = [c.name for c in columns]
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(f"json_columns declares {duplicates} more than once")
        return columns

    @property
    def uses_registry(self) -> bool:
        return self.format in REGISTRY_FORMATS

    def subject_for(self, topic: str, is_key: bool) -> str:
        """Registry subject (TopicNameStrategy unless `subject` is set)."""
        return self.subject or f"{topic}-{'key' if is_key else 'value'}"


METADATA_COLUMNS: tuple[KafkaMetadataColumn, ...] = get_args(KafkaMetadataColumn)
ALL_METADATA_COLUMNS: tuple[MetadataColumn, ...] = get_args(MetadataColumn)
METADATA_PREFIX = "_kafka_"
CDC_PREFIX = "_"

UTC_MICROS = pa.timestamp("us", tz="UTC")
HEADERS_TYPE = pa.map_(pa.string(), pa.binary())


def metadata_column_name(name: str) -> str:
    """`offset` -> `_kafka_offset`; `cdc_lsn` -> `_cdc_lsn`."""
    if name not in ALL_METADATA_COLUMNS:
        raise ValueError(
            f"unknown metadata column {name!r}; expected one of {ALL_METADATA_COLUMNS}"
        )
    if name in CDC_METADATA_COLUMNS:
        return CDC_PREFIX + name
    return METADATA_PREFIX + name


# Arrow marks every decoded field nullable (a record may still lack one); a field whose
# schema declares it can never be null carries this metadata, so plan can tell a key
# schema that lets a key field be null from one that does not (issue 41).
DECLARED_NOT_NULL = {b"tableflow.declared_nullable": b"false"}


def declared_nullable(field: pa.Field) -> bool:
    """Whether the field's schema lets it be null (Arrow's own flag when unknown)."""
    metadata = field.metadata or {}
    if b"tableflow.declared_nullable" in metadata:
        return metadata[b"tableflow.declared_nullable"] != b"false"
    return bool(field.nullable)


def metadata_field(name: str, key_type: pa.DataType) -> pa.Field:
    """The Arrow field of a metadata column (`key_type` is the decoded key's type)."""
    types: dict[str, pa.DataType] = {
        "topic": pa.string(),
        "partition": pa.int32(),
        "offset": pa.int64(),
        "timestamp": UTC_MICROS,
        "key": key_type,
        "headers": HEADERS_TYPE,
        "cdc_op": pa.string(),
        "cdc_source_ts": UTC_MICROS,
        "cdc_lsn": pa.int64(),
        "cdc_tx_id": pa.int64(),
        "cdc_last_commit_lsn": pa.int64(),
    }
    return pa.field(metadata_column_name(name), types[name], nullable=True)
