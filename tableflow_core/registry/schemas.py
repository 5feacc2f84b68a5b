"""Schema types, validation and canonical forms (pure functions, no I/O).

Identity of a schema is (type, canonical text, references): the same schema
registered under two subjects gets the same global id, whatever its whitespace.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import fastavro
from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from tableflow_core.registry.errors import RegistryError, invalid_schema

_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_AVRO_PRIMITIVES = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
)
_AVRO_NAMED = frozenset({"record", "error", "enum", "fixed"})
MAX_AVRO_DEPTH = 128

# Deterministic guids: the same schema gets the same guid on every registry instance.
_GUID_NAMESPACE = uuid.UUID("5f0c4a9e-6a0f-4c7e-9a55-7ab1e0f10c01")


class SchemaType(StrEnum):
    AVRO = "AVRO"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"

    @classmethod
    def parse(cls, value: object) -> SchemaType:
        if value is None or value == "":
            return cls.AVRO
        if not isinstance(value, str):
            raise invalid_schema(f"schemaType must be a string, not {type(value).__name__}")
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
        return json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)
    except json.JSONDecodeError as exc:
        raise invalid_schema(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise invalid_schema("the schema nests too deeply") from None


def fingerprint(definition: SchemaDefinition) -> str:
    refs = json.dumps([r.to_dict() for r in definition.references], sort_keys=True)
    material = f"{definition.schema_type.value}\n{canonical_text(definition)}\n{refs}"
    return hashlib.sha256(material.encode()).hexdigest()


def guid_for(fingerprint_hex: str) -> str:
    return str(uuid.uuid5(_GUID_NAMESPACE, fingerprint_hex))


def parse_avro(schema: str, referenced: list[str] | None = None) -> tuple[Any, dict[str, Any]]:
    """Parse an Avro schema (after its referenced schemas); return it and its named types.

    fastavro parses; `avro_problems` adds the rules of the Avro specification (and of
    Java's parser, which Confluent uses) that fastavro does not enforce.
    """
    named: dict[str, Any] = {}
    try:
        for ref_text in dict.fromkeys(referenced or []):  # a shared dependency counts once
            fastavro.parse_schema(json.loads(ref_text), named_schemas=named, _write_hint=False)
        raw = json.loads(schema)
        problems = avro_problems(raw)
        if problems:
            raise invalid_schema("; ".join(problems[:10]))
        parsed = fastavro.parse_schema(raw, named_schemas=named, _write_hint=False)
    except json.JSONDecodeError as exc:
        raise invalid_schema(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise invalid_schema("the schema nests too deeply") from None
    except RegistryError:
        raise
    except Exception as exc:  # fastavro raises several exception types for bad schemas
        raise invalid_schema(str(exc)) from None
    return parsed, named


def avro_problems(schema: Any) -> list[str]:
    """What makes `schema` (parsed JSON) an invalid Avro schema, beyond what fastavro checks:
    invalid names, duplicate field names, unions inside unions or with two branches of one
    type, a negative fixed size, nesting deeper than MAX_AVRO_DEPTH."""
    problems: list[str] = []
    _walk_avro(schema, "", problems, 0)
    return problems


def _walk_avro(schema: Any, namespace: str, problems: list[str], depth: int) -> None:
    if depth > MAX_AVRO_DEPTH:
        problems.append(f"the schema nests deeper than {MAX_AVRO_DEPTH} levels")
        return
    if isinstance(schema, list):
        _walk_union(schema, namespace, problems, depth)
        return
    if not isinstance(schema, dict):
        return  # a primitive or a reference to a named type: fastavro resolves those
    kind = schema.get("type")
    if not isinstance(kind, str):
        _walk_avro(kind, namespace, problems, depth + 1)
        return
    if kind in _AVRO_NAMED:
        namespace = _check_avro_name(schema, namespace, problems)
    if kind in ("record", "error"):
        fields = schema.get("fields")
        seen: set[str] = set()
        for item in fields if isinstance(fields, list) else []:
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str) or not _AVRO_NAME.fullmatch(name):
                problems.append(f"invalid field name {name!r} in record {schema.get('name')!r}")
            elif name in seen:
                problems.append(f"duplicate field name {name!r} in record {schema.get('name')!r}")
            else:
                seen.add(name)
            if isinstance(item, dict):
                _walk_avro(item.get("type"), namespace, problems, depth + 1)
    elif kind == "fixed":
        size = schema.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            problems.append(f"fixed {schema.get('name')!r} needs a non-negative integer size")
    elif kind == "array":
        _walk_avro(schema.get("items"), namespace, problems, depth + 1)
    elif kind == "map":
        _walk_avro(schema.get("values"), namespace, problems, depth + 1)


def _walk_union(branches: list[Any], namespace: str, problems: list[str], depth: int) -> None:
    seen: set[str] = set()
    for branch in branches:
        if isinstance(branch, list):
            problems.append("unions cannot contain other unions")
            continue
        key = _union_branch_key(branch, namespace)
        if key in seen:
            problems.append(f"duplicate union branch {key!r}")
        seen.add(key)
        _walk_avro(branch, namespace, problems, depth + 1)


def _union_branch_key(branch: Any, namespace: str) -> str:
    """Branches are told apart by type, and named types by full name (Avro spec)."""
    if isinstance(branch, str):
        return _full_name(branch, namespace) if branch not in _AVRO_PRIMITIVES else branch
    if isinstance(branch, dict):
        kind = branch.get("type")
        if isinstance(kind, str) and kind in _AVRO_NAMED:
            name = branch.get("name")
            ns = branch.get("namespace", namespace)
            return _full_name(str(name), ns if isinstance(ns, str) else namespace)
        if isinstance(kind, str):
            return _union_branch_key(kind, namespace) if kind not in ("array", "map") else kind
        return json.dumps(kind, sort_keys=True)
    return json.dumps(branch)


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _check_avro_name(schema: dict[str, Any], namespace: str, problems: list[str]) -> str:
    """Check the name and namespace of a named type; return the namespace its children use."""
    name = schema.get("name")
    if not isinstance(name, str) or not all(_AVRO_NAME.fullmatch(p) for p in name.split(".")):
        problems.append(f"invalid name {name!r}")
        return namespace
    own = schema.get("namespace", namespace)
    if own is None:
        own = ""
    if not isinstance(own, str) or (
        own and not all(_AVRO_NAME.fullmatch(p) for p in own.split("."))
    ):
        problems.append(f"invalid namespace {own!r} of {name!r}")
        return namespace
    return name.rsplit(".", 1)[0] if "." in name else own


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
        except RecursionError:
            raise invalid_schema("the schema nests too deeply") from None
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
