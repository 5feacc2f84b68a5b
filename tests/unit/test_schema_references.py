"""Schemas with references folded into one document (schemas/references.py), checked by
reading records written with the original schemas (fastavro) and by the mappers."""

from __future__ import annotations

import io
import json

import fastavro
import pyarrow as pa
from confluent_kafka.schema_registry import Schema

from tableflow_core.schemas.avro_types import map_avro_schema
from tableflow_core.schemas.json_schema_types import map_json_schema
from tableflow_core.schemas.references import Referenced, bundle_json_schema, inline_avro
from tests.avro_records import avro_record, nullable

COUNTRY = {"type": "enum", "name": "Country", "symbols": ["NL", "DE"]}
ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "shop",
    "fields": [{"name": "street", "type": "string"}, {"name": "country", "type": COUNTRY}],
}
ORDER = avro_record(
    "Order",
    namespace="shop",
    id="string",
    ship_to="shop.Address",
    bill_to=nullable("Address"),
    origin="Country",
)


def test_avro_types_from_references_are_defined_once_where_first_used() -> None:
    inlined = inline_avro(json.dumps(ORDER), [json.dumps(ADDRESS)])
    reader = fastavro.parse_schema(inlined)  # a named type defined twice would not parse
    named: dict = {}
    fastavro.parse_schema(ADDRESS, named_schemas=named)
    writer = fastavro.parse_schema(ORDER, named_schemas=named)
    value = {
        "id": "o1",
        "ship_to": {"street": "Main", "country": "NL"},
        "bill_to": {"street": "Side", "country": "DE"},
        "origin": "DE",
    }
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, writer, value)
    assert fastavro.schemaless_reader(io.BytesIO(buffer.getvalue()), reader) == value
    mapping = map_avro_schema(json.dumps(inlined))
    address = pa.struct([("street", pa.string()), ("country", pa.string())])
    assert mapping.arrow_type.field("ship_to").type == address
    assert mapping.arrow_type.field("bill_to").type == address


def test_a_schema_without_the_referenced_type_is_left_as_is() -> None:
    plain = {"type": "record", "name": "P", "fields": [{"name": "n", "type": "long"}]}
    assert inline_avro(json.dumps(plain), [json.dumps(ADDRESS)]) == plain


def test_json_schema_references_are_bundled_under_defs() -> None:
    address = {
        "$id": "https://example.com/address.json",
        "type": "object",
        "properties": {"street": {"type": "string"}, "zip": {"$ref": "#/definitions/zip"}},
        "definitions": {"zip": {"type": "string"}},
    }
    order = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "ship_to": {"$ref": "https://example.com/address.json"},
            "items": {"type": "array", "items": {"$ref": "#/definitions/item"}},
        },
        "definitions": {"item": {"type": "integer"}},
    }
    referenced = [
        Referenced("https://example.com/address.json", "a", 1, Schema(json.dumps(address), "JSON"))
    ]
    bundled = bundle_json_schema(json.dumps(order), referenced)
    mapping = map_json_schema(json.dumps(bundled))
    assert mapping.arrow_type == pa.struct(
        [
            ("id", pa.string()),
            ("ship_to", pa.struct([("street", pa.string()), ("zip", pa.string())])),
            ("items", pa.list_(pa.int64())),
        ]
    )
