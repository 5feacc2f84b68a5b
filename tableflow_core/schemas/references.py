"""Schemas with references (Confluent `references`), made self-contained for the mappers.

A registry schema may name types defined in other subjects: an Avro record using
`shop.Address` registered under another subject, a JSON Schema whose `$ref` is another
schema's URL, a Protobuf file importing another file. The Avro and JSON Schema mappers
(`avro_types`, `json_schema_types`) read one document, so the referenced schemas are
fetched (each `(subject, version)` once, dependencies first) and folded in:

- Avro: each referenced named type is written out where it is first used and named
  after that (a named type may be defined once per schema), so fastavro parses the
  result and reads records written with the original schema.
- JSON Schema: each referenced document goes under `$defs` and the `$ref`s naming it
  (by reference name or `$id`) point there; its own local `$ref`s are rewritten with it.

Protobuf resolves its imports into a descriptor pool (`protobuf_types.file_descriptor_for`),
fetched with `fetch_version` here.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import fastavro
from confluent_kafka.schema_registry import RegisteredSchema, Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from tableflow_core.schemas.arrow_values import SchemaMappingError

MAX_REFERENCES = 1_000
SERIALIZED = "serialized"

_AVRO_PRIMITIVES = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
)
_AVRO_NAMED = frozenset({"record", "error", "enum", "fixed"})


@dataclass(frozen=True)
class Referenced:
    """One referenced schema: the name the referring schema uses, and its text."""

    name: str
    subject: str
    version: int
    schema: Schema


def fetch_version(
    client: SchemaRegistryClient, subject: str, version: int | str, fmt: str | None = None
) -> RegisteredSchema:
    """`GET /subjects/{subject}/versions/{version}[?format=fmt]`.

    Apicurio Registry 3.3.3 answers `format=serialized` with HTTP 500 for Protobuf schemas
    registered as base64 descriptors (what confluent-kafka's serializer registers); without
    `format` it returns that base64 descriptor, which is what `serialized` means. So a 5xx
    to a `serialized` request is asked again without it (docs/environment.md, Apicurio).
    """
    try:
        return client.get_version(subject, version, fmt=fmt)  # type: ignore[arg-type]
    except SchemaRegistryError as exc:
        if fmt != SERIALIZED or (exc.http_status_code or 0) < 500:
            raise
    return client.get_version(subject, version)  # type: ignore[arg-type]


def fetch_schema(client: SchemaRegistryClient, schema_id: int, fmt: str | None = None) -> Schema:
    """`GET /schemas/ids/{id}[?format=fmt]`, with `fetch_version`'s fallback for Apicurio."""
    try:
        return client.get_schema(schema_id, fmt=fmt) if fmt else client.get_schema(schema_id)
    except SchemaRegistryError as exc:
        if fmt != SERIALIZED or (exc.http_status_code or 0) < 500:
            raise
    return client.get_schema(schema_id)


def referenced_schemas(
    schema: Schema,
    client: SchemaRegistryClient,
    fmt: str | None = None,
    skip: Callable[[str], bool] = lambda _name: False,
) -> list[Referenced]:
    """Every schema `schema` references, transitively, each once, dependencies first
    (references whose name `skip` accepts are left out, with what they reference).
    A reference the registry does not have is a SchemaMappingError naming it; other
    registry errors propagate (the registry is down or failing)."""
    found: dict[tuple[str, int], Referenced] = {}
    visiting: set[tuple[str, int]] = set()

    def visit(references: Iterable[Any]) -> None:
        for reference in references or ():
            if skip(str(reference.name)):
                continue
            key = (str(reference.subject), int(reference.version))
            if key in found or key in visiting:
                continue
            if len(found) >= MAX_REFERENCES:
                raise SchemaMappingError(f"more than {MAX_REFERENCES} schema references")
            visiting.add(key)
            try:
                registered = fetch_version(client, key[0], key[1], fmt)
            except SchemaRegistryError as exc:
                if exc.http_status_code != 404:
                    raise
                raise SchemaMappingError(
                    f"reference {reference.name!r}: subject {key[0]!r} version {key[1]} is "
                    f"not in the registry ({exc.error_message})"
                ) from None
            visit(registered.schema.references or ())
            visiting.discard(key)
            found[key] = Referenced(str(reference.name), key[0], key[1], registered.schema)

    visit(schema.references or ())
    return list(found.values())


def self_contained_text(schema: Schema, client: SchemaRegistryClient) -> str:
    """The schema's text with its references folded in (Avro and JSON Schema); the text
    as is when it has none."""
    text = schema.schema_str or ""
    if not schema.references:
        return text
    referenced = referenced_schemas(schema, client)
    if (schema.schema_type or "AVRO") == "AVRO":
        return json.dumps(inline_avro(text, [r.schema.schema_str or "" for r in referenced]))
    if schema.schema_type == "JSON":
        return json.dumps(bundle_json_schema(text, referenced))
    return text


# -- Avro ------------------------------------------------------------------------------------


def inline_avro(text: str, referenced_texts: list[str]) -> Any:
    """`text` with every named type it takes from `referenced_texts` (dependencies first)
    defined at its first use."""
    named: dict[str, Any] = {}
    try:
        for referenced in referenced_texts:
            fastavro.parse_schema(json.loads(referenced), named_schemas=named, _write_hint=False)
        schema = json.loads(text)
    except Exception as exc:  # fastavro raises several types for invalid schemas
        raise SchemaMappingError(f"invalid referenced Avro schema: {exc}") from exc
    return _AvroInliner(named).walk(schema, "")


class _AvroInliner:
    def __init__(self, external: dict[str, Any]) -> None:
        self.external = external
        self.defined: set[str] = set()

    def walk(self, node: Any, namespace: str) -> Any:
        if isinstance(node, str):
            return self._name(node, namespace)
        if isinstance(node, list):
            return [self.walk(branch, namespace) for branch in node]
        if not isinstance(node, dict):
            return node
        kind = node.get("type")
        if kind in _AVRO_NAMED:
            full = _full_name(str(node.get("name", "")), node.get("namespace", namespace))
            self.defined.add(full)
            inner = full.rsplit(".", 1)[0] if "." in full else ""
            if kind in ("record", "error"):
                fields = node.get("fields")
                if isinstance(fields, list):
                    node = {
                        **node,
                        "fields": [
                            {**f, "type": self.walk(f.get("type"), inner)}
                            if isinstance(f, dict)
                            else f
                            for f in fields
                        ],
                    }
            return node
        if kind == "array":
            return {**node, "items": self.walk(node.get("items"), namespace)}
        if kind == "map":
            return {**node, "values": self.walk(node.get("values"), namespace)}
        if isinstance(kind, dict | list):
            return {**node, "type": self.walk(kind, namespace)}
        return node

    def _name(self, name: str, namespace: str) -> Any:
        if name in _AVRO_PRIMITIVES:
            return name
        full = _full_name(name, namespace)
        if full not in self.external and name in self.external:
            full = name
        if full in self.defined or full not in self.external:
            return name
        definition = copy.deepcopy(self.external[full])
        return self.walk(definition, namespace)


def _full_name(name: str, namespace: Any) -> str:
    if "." in name or not namespace or not isinstance(namespace, str):
        return name
    return f"{namespace}.{name}"


# -- JSON Schema -----------------------------------------------------------------------------

_DEFS_KEY = "tableflow_references"


def bundle_json_schema(text: str, referenced: list[Referenced]) -> Any:
    """`text` with each referenced document under `$defs`, and the `$ref`s that name a
    reference (by its name or the document's `$id`) pointing there."""
    try:
        document = json.loads(text)
        documents = [json.loads(r.schema.schema_str or "") for r in referenced]
    except ValueError as exc:
        raise SchemaMappingError(f"invalid referenced JSON Schema: {exc}") from exc
    targets: dict[str, str] = {}
    for index, (reference, parsed) in enumerate(zip(referenced, documents, strict=True)):
        pointer = f"#/$defs/{_DEFS_KEY}/{index}"
        targets[reference.name.rstrip("#")] = pointer
        if isinstance(parsed, dict) and isinstance(parsed.get("$id"), str):
            targets.setdefault(parsed["$id"].rstrip("#"), pointer)
    bundled = [
        _rewrite_refs(parsed, targets, f"#/$defs/{_DEFS_KEY}/{index}")
        for index, parsed in enumerate(documents)
    ]
    root = _rewrite_refs(document, targets, "#")
    if not isinstance(root, dict):
        return root
    definitions = dict(root.get("$defs") or {})
    definitions[_DEFS_KEY] = {str(index): item for index, item in enumerate(bundled)}
    return {**root, "$defs": definitions}


def _rewrite_refs(node: Any, targets: dict[str, str], local: str) -> Any:
    """Rewrite `$ref`s: external ones to their bundled place, local ones (`#/...`) under
    `local` (the document's own place in the bundle)."""
    rewrite: Callable[[Any], Any] = lambda child: _rewrite_refs(child, targets, local)  # noqa: E731
    if isinstance(node, list):
        return [rewrite(item) for item in node]
    if not isinstance(node, dict):
        return node
    result = {key: rewrite(value) for key, value in node.items()}
    ref = node.get("$ref")
    if isinstance(ref, str):
        base, _, fragment = ref.partition("#")
        if not base:
            result["$ref"] = local + fragment if local != "#" else ref
        elif base in targets:
            result["$ref"] = targets[base] + fragment
    return result
