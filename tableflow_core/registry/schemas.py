"""Schema types, validation and canonical forms (pure functions, no I/O).

Identity of a schema is (type, canonical text, references): the same schema
registered under two subjects gets the same global id, whatever its whitespace.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import fastavro
from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from tableflow_core.registry.errors import invalid_schema

# Deterministic guids: the same schema gets the same guid on every registry instance.
_GUID_NAMESPACE = uuid.UUID("5f0c4a9e-6a0f-4c7e-9a55-7ab1e0f10c01")


class SchemaType(StrEnum):
    AVRO = "AVRO"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"

    @classmethod
    def parse(cls, value: str | None) -> SchemaType:
        if value is None or value == "":
            return cls.AVRO
        try:
            return cls(value.upper())
        except ValueError:
            raise invalid_schema(f"unknown schemaType {value!r}") from None


@dataclass(frozen=True)
class Reference:
    """A named dependency on another subject's version (Confluent `references` item)."""

    name: str
    subject: str
    version: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class SchemaDefinition:
    """What a client submits: schema text, its type and references."""

    schema: str
    schema_type: SchemaType = SchemaType.AVRO
    references: tuple[Reference, ...] = field(default_factory=tuple)


def parse_references(raw: object) -> tuple[Reference, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise invalid_schema("references must be a list")
    refs = []
    for item in raw:
        if not isinstance(item, dict) or not {"name", "subject", "version"} <= item.keys():
            raise invalid_schema(f"reference {item!r} needs name, subject and version")
        try:
            refs.append(Reference(str(item["name"]), str(item["subject"]), int(item["version"])))
        except (TypeError, ValueError):
            raise invalid_schema(f"reference {item!r} has a non-integer version") from None
    return tuple(refs)


def definition_from_request(body: object) -> SchemaDefinition:
    """Read the body of a register/lookup/compatibility request."""
    if not isinstance(body, dict):
        raise invalid_schema("request body must be a JSON object")
    schema = body.get("schema")
    if not isinstance(schema, str) or not schema.strip():
        raise invalid_schema("'schema' must be a non-empty string")
    return SchemaDefinition(
        schema=schema,
        schema_type=SchemaType.parse(body.get("schemaType")),
        references=parse_references(body.get("references")),
    )


def canonical_text(definition: SchemaDefinition) -> str:
    """Whitespace-insensitive form used for identity (field order is kept: it matters in Avro)."""
    if definition.schema_type is SchemaType.PROTOBUF:
        return definition.schema.strip()
    try:
        parsed = json.loads(definition.schema)
    except json.JSONDecodeError as exc:
        raise invalid_schema(f"not valid JSON: {exc}") from None
    return json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)


def fingerprint(definition: SchemaDefinition) -> str:
    refs = json.dumps([r.to_dict() for r in definition.references], sort_keys=True)
    material = f"{definition.schema_type.value}\n{canonical_text(definition)}\n{refs}"
    return hashlib.sha256(material.encode()).hexdigest()


def guid_for(fingerprint_hex: str) -> str:
    return str(uuid.uuid5(_GUID_NAMESPACE, fingerprint_hex))


def parse_avro(schema: str, referenced: list[str] | None = None) -> tuple[Any, dict[str, Any]]:
    """Parse an Avro schema (after its referenced schemas); return it and its named types."""
    named: dict[str, Any] = {}
    try:
        for ref_text in dict.fromkeys(referenced or []):  # a shared dependency counts once
            fastavro.parse_schema(json.loads(ref_text), named_schemas=named, _write_hint=False)
        parsed = fastavro.parse_schema(json.loads(schema), named_schemas=named, _write_hint=False)
    except json.JSONDecodeError as exc:
        raise invalid_schema(f"not valid JSON: {exc}") from None
    except Exception as exc:  # fastavro raises several exception types for bad schemas
        raise invalid_schema(str(exc)) from None
    return parsed, named


def validate(definition: SchemaDefinition, referenced: list[str]) -> None:
    """Raise 42201 if the schema cannot be parsed as its declared type.

    `referenced` holds the texts of the schemas named in `references`, dependencies first.
    """
    if definition.schema_type is SchemaType.AVRO:
        parse_avro(definition.schema, referenced)
    elif definition.schema_type is SchemaType.JSON:
        try:
            parsed = json.loads(definition.schema)
        except json.JSONDecodeError as exc:
            raise invalid_schema(f"not valid JSON: {exc}") from None
        if not isinstance(parsed, dict | bool):
            raise invalid_schema("a JSON Schema must be an object or a boolean")
    else:
        _validate_protobuf(definition.schema)


def _validate_protobuf(schema: str) -> None:
    """Accept a base64 FileDescriptorProto (what confluent-kafka sends) or .proto text.

    .proto text cannot be parsed without protoc; it is stored as given.
    """
    text = schema.strip()
    if text.startswith(("syntax", "package", "message", "import", "//", "option", "edition")):
        return
    try:
        raw = base64.standard_b64decode(text.encode("ascii"))
        descriptor_pb2.FileDescriptorProto().ParseFromString(raw)
    except (binascii.Error, UnicodeEncodeError, DecodeError, ValueError) as exc:
        raise invalid_schema(
            f"PROTOBUF schema is neither a base64 FileDescriptorProto nor .proto text ({exc})"
        ) from None
