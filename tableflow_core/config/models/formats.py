"""How a record's key and value are encoded (`value:`, `key:`), and plain-JSON columns."""

from __future__ import annotations

import re
from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator

from tableflow_core.config.models.base import IDENTIFIER, ConfigModel
from tableflow_core.config.names import MAX_NAME_LENGTH

FormatName = Literal["avro", "json_schema", "protobuf", "json", "connect_json", "string", "bytes"]
REGISTRY_FORMATS = ("avro", "json_schema", "protobuf")
# Change-data-capture envelopes a value may be wrapped in (docs/cdc.md).
Envelope = Literal["debezium"]
ENVELOPE_FORMATS = ("avro", "json_schema", "protobuf", "connect_json")


# Column types a plain-JSON column may declare (Iceberg type names), plus `decimal(P,S)`.
JsonColumnType = Literal[
    "string",
    "int",
    "long",
    "float",
    "double",
    "boolean",
    "date",
    "timestamp",
    "timestamptz",
    "binary",
    "json",
]
DECIMAL_TYPE = re.compile(r"^decimal\(\s*\d+\s*,\s*\d+\s*\)$")


class JsonColumn(ConfigModel):
    name: str = Field(pattern=IDENTIFIER, max_length=MAX_NAME_LENGTH, description="Column name.")
    type: str = Field(
        "string",
        description="string, int, long, float, double, boolean, date, timestamp, timestamptz, "
        "binary (base64 text), json (keeps the sub-document as JSON text) or `decimal(P,S)`.",
    )
    path: str | None = Field(
        None, description="Dotted path into the JSON object; default the column name."
    )

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in get_args(JsonColumnType) and not DECIMAL_TYPE.match(value):
            allowed = ", ".join(get_args(JsonColumnType))
            raise ValueError(f"unknown column type {value!r}; use one of {allowed} or decimal(P,S)")
        return value


class Format(ConfigModel):
    """How a record's value or key is encoded."""

    format: FormatName = Field(
        description="avro, json_schema, protobuf (through the registry); json, string, bytes; "
        "connect_json (Kafka Connect's JsonConverter with schemas.enable=true: each record "
        "embeds its schema; docs/cdc.md)."
    )
    subject: str | None = Field(
        None, description="Registry subject; default `<topic>-value` / `<topic>-key`."
    )
    version: int | Literal["latest"] = Field(
        "latest", description="Registry version: `latest` or a pinned number."
    )
    message: str | None = Field(
        None,
        description="Protobuf only: the message the records hold (simple or fully-qualified "
        "name); needed when the schema has several top-level messages.",
    )
    columns: list[JsonColumn] | None = Field(
        None,
        description="Plain `json` only: the columns to extract; without it the raw JSON lands in `value`.",
    )
    envelope: Envelope | None = Field(
        None,
        description="Value only: `debezium`: each record is a Debezium change event; the "
        "table's columns are its `after` image's (docs/cdc.md). With `mode: upsert` the table "
        "mirrors the source table, with `mode: append` it keeps every change.",
    )

    @model_validator(mode="after")
    def _registry_fields_only_for_registry_formats(self) -> Format:
        if self.format not in REGISTRY_FORMATS and (self.subject or self.version != "latest"):
            raise ValueError(
                f"subject/version only apply to registry formats {REGISTRY_FORMATS}, not {self.format!r}"
            )
        if self.columns is not None and self.format != "json":
            raise ValueError("columns only apply to format json")
        if self.message is not None and self.format != "protobuf":
            raise ValueError("message only applies to format protobuf")
        if self.envelope is not None and self.format == "json":
            raise ValueError(
                "envelope debezium with Connect's JsonConverter is `format: connect_json` "
                "(schemas.enable=true: each record embeds its schema); plain `json` has no "
                "types to read the envelope by"
            )
        if self.envelope is not None and self.format not in ENVELOPE_FORMATS:
            raise ValueError(
                f"envelope {self.envelope} applies to formats {ENVELOPE_FORMATS}, not {self.format!r}"
            )
        if self.envelope is not None and self.columns is not None:
            raise ValueError(
                "columns do not apply to a Debezium envelope: its columns come from the "
                "change events' schema"
            )
        return self
