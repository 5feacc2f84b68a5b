"""JSON Schema -> Arrow type mapping, and the adapters that shape parsed JSON values.

Values stay close to what `json.loads` returns: timestamps, dates and decimals are
kept as text and cast by Arrow (`TemporalAs.TEXT`); sub-documents with no fixed
shape become JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from tableflow_core.schemas.arrow_values import SchemaMappingError
from tableflow_core.schemas.expansion import MAX_DEPTH, ExpansionBudget, check_expansion
from tableflow_core.schemas.formats import DECLARED_NOT_NULL

Adapter = Callable[[Any], Any]

UTC_MICROS = pa.timestamp("us", tz="UTC")

_STRING_FORMATS: dict[str, pa.DataType] = {
    "date-time": UTC_MICROS,
    "date": pa.date32(),
}
_SCALARS: dict[str, pa.DataType] = {
    "integer": pa.int64(),
    "number": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "null": pa.string(),
}


@dataclass(frozen=True)
class JsonSchemaMapping:
    arrow_type: pa.DataType
    is_record: bool  # an object with properties: its properties become columns
    adapter: Adapter | None


def map_json_schema(schema_text: str) -> JsonSchemaMapping:
    """Map a JSON Schema document (registry text) to Arrow; raises SchemaMappingError."""
    try:
        document = json.loads(schema_text)
    except json.JSONDecodeError as exc:
        raise SchemaMappingError(f"invalid JSON Schema document: {exc}") from exc
    except RecursionError:
        raise SchemaMappingError(f"the schema nests more than {MAX_DEPTH} levels deep") from None
    walker = _JsonSchemaWalker(document)
    arrow_type, adapter = walker.visit(document, path="", refs=())
    check_expansion(arrow_type)  # the walk counted columns; this checks column depth
    return JsonSchemaMapping(arrow_type, pa.types.is_struct(arrow_type), adapter)


def as_json_text(value: Any) -> Any:
    """A value of no fixed shape, kept as JSON text (strings stay as they are)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _number_text(value: Any) -> Any:
    return None if value is None else str(value)


class _JsonSchemaWalker:
    """Expands `$ref`s where they are used: the budget stops a walk that would expand a
    reused definition into too many columns (the walk costs what it produces)."""

    def __init__(self, document: Any) -> None:
        self.document = document
        self.budget = ExpansionBudget()

    def _resolve_ref(self, ref: str, path: str) -> Any:
        if not ref.startswith("#"):
            raise SchemaMappingError(
                f"$ref {ref!r} at {path or '<root>'}: only references within the document are supported"
            )
        node = self.document
        for part in ref[1:].split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise SchemaMappingError(f"$ref {ref!r} at {path or '<root>'} does not resolve")
            node = node[part]
        return node

    def visit(
        self, schema: Any, path: str, refs: tuple[str, ...]
    ) -> tuple[pa.DataType, Adapter | None]:
        with self.budget.walking(path):
            return self._visit(schema, path, refs)

    def _visit(
        self, schema: Any, path: str, refs: tuple[str, ...]
    ) -> tuple[pa.DataType, Adapter | None]:
        if schema is True or schema == {}:
            return pa.string(), as_json_text
        if not isinstance(schema, dict):
            raise SchemaMappingError(f"invalid JSON Schema at {path or '<root>'}: {schema!r}")
        if "$ref" in schema:
            ref = schema["$ref"]
            if ref in refs:
                raise SchemaMappingError(
                    f"recursive $ref {ref!r} at {path or '<root>'}: "
                    "Iceberg tables cannot hold recursive types"
                )
            return self.visit(self._resolve_ref(ref, path), path, (*refs, ref))
        for combinator in ("oneOf", "anyOf"):
            if combinator in schema:
                return self._alternatives(schema[combinator], path, refs)
        if "allOf" in schema:
            return self._all_of(schema, path, refs)
        kind = schema.get("type")
        if isinstance(kind, list):
            non_null = [k for k in kind if k != "null"]
            if len(non_null) == 1:
                return self.visit({**schema, "type": non_null[0]}, path, refs)
            return pa.string(), as_json_text
        if kind is None:
            if "properties" in schema:
                kind = "object"
            elif "items" in schema:
                kind = "array"
            elif "enum" in schema or "const" in schema:
                kind = "string"
            else:
                return pa.string(), as_json_text
        if kind == "object":
            return self._object(schema, path, refs)
        if kind == "array":
            items = schema.get("items", True)
            self.budget.column(f"{path}[]")
            item_type, item_adapter = self.visit(items, f"{path}[]", refs)
            adapter = None if item_adapter is None else _list_adapter(item_adapter)
            return pa.list_(pa.field("element", item_type)), adapter
        if kind == "string":
            return _STRING_FORMATS.get(schema.get("format", ""), pa.string()), None
        if kind == "number" and _is_decimal(schema):
            return pa.decimal128(
                int(schema["precision"]), int(schema.get("scale", 0))
            ), _number_text
        if kind in _SCALARS:
            return _SCALARS[kind], None
        raise SchemaMappingError(f"unsupported JSON Schema type {kind!r} at {path or '<root>'}")

    def _alternatives(
        self, options: list[Any], path: str, refs: tuple[str, ...]
    ) -> tuple[pa.DataType, Adapter | None]:
        non_null = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
        if len(non_null) == 1:
            return self.visit(non_null[0], path, refs)
        # Several shapes: keep the value as JSON text rather than guess.
        return pa.string(), as_json_text

    def _all_of(
        self, schema: dict[str, Any], path: str, refs: tuple[str, ...]
    ) -> tuple[pa.DataType, Adapter | None]:
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        properties: dict[str, Any] = dict(merged.get("properties", {}))
        required: list[str] = list(merged.get("required", []))
        for part in schema["allOf"]:
            seen: set[str] = set()
            while isinstance(part, dict) and "$ref" in part:
                if part["$ref"] in seen:
                    raise SchemaMappingError(
                        f"recursive $ref {part['$ref']!r} in allOf at {path or '<root>'}"
                    )
                seen.add(part["$ref"])
                part = self._resolve_ref(part["$ref"], path)
            if isinstance(part, dict):
                properties.update(part.get("properties", {}))
                required.extend(part.get("required", []))
                if "type" in part and "type" not in merged:
                    merged["type"] = part["type"]
        merged["properties"] = properties
        merged["required"] = required
        return self.visit(merged, path, refs)

    def _object(
        self, schema: dict[str, Any], path: str, refs: tuple[str, ...]
    ) -> tuple[pa.DataType, Adapter | None]:
        properties = schema.get("properties")
        if not properties:
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                self.budget.column(f"{path}{{key}}")
                self.budget.column(f"{path}{{}}")
                value_type, value_adapter = self.visit(extra, f"{path}{{}}", refs)
                map_type = pa.map_(
                    pa.field("key", pa.string(), nullable=False), pa.field("value", value_type)
                )
                return map_type, None if value_adapter is None else _map_adapter(value_adapter)
            return pa.string(), as_json_text
        fields: list[pa.Field] = []
        adapters: dict[str, Adapter] = {}
        for name, subschema in properties.items():
            field_path = f"{path}.{name}" if path else name
            self.budget.column(field_path)
            field_type, field_adapter = self.visit(subschema, field_path, refs)
            not_null = name in schema.get("required", ()) and not _json_nullable(subschema)
            fields.append(
                pa.field(
                    name,
                    field_type,
                    nullable=True,
                    metadata=DECLARED_NOT_NULL if not_null else None,
                )
            )
            if field_adapter is not None:
                adapters[name] = field_adapter
        return pa.struct(fields), _object_adapter(adapters)


def _json_nullable(schema: Any) -> bool:
    """A JSON Schema that admits null (a `null` type, or a null branch of anyOf/oneOf)."""
    if not isinstance(schema, dict):
        return schema is not False
    kinds = schema.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return True
    if kinds is None and not any(k in schema for k in ("anyOf", "oneOf", "$ref", "enum", "const")):
        return True  # no type: anything, null included
    return any(_json_nullable(b) for k in ("anyOf", "oneOf") for b in schema.get(k, ()))


def _is_decimal(schema: dict[str, Any]) -> bool:
    # Confluent's convention for decimals in JSON Schema: "connect.type": "bytes" + precision.
    return "precision" in schema and int(schema["precision"]) <= 38


def _list_adapter(item: Adapter) -> Adapter:
    return lambda v: v if not isinstance(v, list) else [item(x) for x in v]


def _map_adapter(value: Adapter) -> Adapter:
    return lambda v: v if not isinstance(v, dict) else {k: value(x) for k, x in v.items()}


def _object_adapter(adapters: dict[str, Adapter]) -> Adapter | None:
    if not adapters:
        return None
    items = tuple(adapters.items())

    def adapt(obj: Any) -> Any:
        if not isinstance(obj, dict):
            return obj
        out = dict(obj)
        for name, adapter in items:
            value = out.get(name)
            if value is not None:
                out[name] = adapter(value)
        return out

    return adapt
