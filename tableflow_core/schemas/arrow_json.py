"""Arrow schemas and types as fields of the plan's models (exact, and JSON-serializable).

A plan carries the exact Arrow schema each table is created with and decoded to: nested
field nullability, timestamp units and zones, decimal precision, schema metadata (the
Protobuf message a table's records must hold) all matter to apply, and the plan's
readable column list (`Column`: Iceberg type names) keeps none of them. In JSON such a
field is the Arrow IPC serialization of the schema, base64-encoded; in Python it is the
`pa.Schema` (or `pa.DataType`) itself.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

import pyarrow as pa
from pydantic import PlainSerializer, PlainValidator, WithJsonSchema


def schema_to_text(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def _schema(value: Any) -> pa.Schema:
    if isinstance(value, pa.Schema):
        return value
    if isinstance(value, str):
        return schema_from_text(value)
    raise ValueError(f"expected an Arrow schema (base64 IPC text), got {type(value).__name__}")


def _type(value: Any) -> pa.DataType:
    if isinstance(value, pa.DataType):
        return value
    if isinstance(value, str):
        return schema_from_text(value).field(0).type
    raise ValueError(f"expected an Arrow type (base64 IPC text), got {type(value).__name__}")


def _type_to_text(data_type: pa.DataType) -> str:
    return schema_to_text(pa.schema([pa.field("type", data_type)]))


def _base64_text(description: str) -> WithJsonSchema:
    """The field's JSON Schema: base64 text, described."""
    return WithJsonSchema(
        {"type": "string", "contentEncoding": "base64", "description": description}
    )


ArrowSchema = Annotated[
    pa.Schema,
    PlainValidator(_schema),
    PlainSerializer(schema_to_text, return_type=str, when_used="json"),
    _base64_text("An Arrow schema, IPC-serialized and base64-encoded"),
]

ArrowType = Annotated[
    pa.DataType,
    PlainValidator(_type),
    PlainSerializer(_type_to_text, return_type=str, when_used="json"),
    _base64_text("An Arrow type: a one-field Arrow schema, IPC-serialized and base64-encoded"),
]
