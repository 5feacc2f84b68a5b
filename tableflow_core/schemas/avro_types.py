"""Avro schema -> Arrow type mapping and the fastavro reader set-up.

Values are read by fastavro with a *rewritten* writer schema whose date/time/timestamp/uuid
logical types yield plain numbers/text (see `arrow_values`), because building Arrow
arrays from `datetime` objects costs more than decoding the Avro itself.
"""

from __future__ import annotations

import copy
import decimal
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fastavro
import fastavro.read
import pyarrow as pa

from tableflow_core.schemas.arrow_values import SchemaMappingError
from tableflow_core.schemas.expansion import MAX_DEPTH, ExpansionBudget, check_expansion
from tableflow_core.schemas.formats import DECLARED_NOT_NULL

Adapter = Callable[[Any], Any]

UTC_MICROS = pa.timestamp("us", tz="UTC")
LOCAL_MICROS = pa.timestamp("us")
MAX_ICEBERG_DECIMAL_PRECISION = 38

_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
    # A field that is always null: Iceberg has no null type; keep it as an all-null string.
    "null": pa.string(),
}

# Logical types read as plain numbers: new logical-type names fastavro calls back for
# (registering names of our own leaves fastavro's standard readers untouched).
MILLIS_TO_MICROS = "tableflow-millis-to-micros"
NANOS_TO_MICROS = "tableflow-nanos-to-micros"
fastavro.read.LOGICAL_READERS[f"long-{MILLIS_TO_MICROS}"] = lambda d, w, r: d * 1000
fastavro.read.LOGICAL_READERS[f"int-{MILLIS_TO_MICROS}"] = lambda d, w, r: d * 1000
fastavro.read.LOGICAL_READERS[f"long-{NANOS_TO_MICROS}"] = lambda d, w, r: d // 1000

# logicalType -> (Arrow type, rewrite for reading: None = drop the logical type (raw value))
_TEMPORAL_LOGICAL: dict[str, tuple[pa.DataType, str | None]] = {
    "date": (pa.date32(), None),
    # Spark 3.5 cannot write Iceberg `time`: micros since midnight as long (docs/type-mapping.md).
    "time-millis": (pa.int64(), MILLIS_TO_MICROS),
    "time-micros": (pa.int64(), None),
    "timestamp-millis": (UTC_MICROS, MILLIS_TO_MICROS),
    "timestamp-micros": (UTC_MICROS, None),
    "timestamp-nanos": (UTC_MICROS, NANOS_TO_MICROS),
    "local-timestamp-millis": (LOCAL_MICROS, MILLIS_TO_MICROS),
    "local-timestamp-micros": (LOCAL_MICROS, None),
    "local-timestamp-nanos": (LOCAL_MICROS, NANOS_TO_MICROS),
    "uuid": (pa.string(), None),
}
_LOGICAL_BASES = {
    "date": {"int"},
    "time-millis": {"int"},
    "uuid": {"string"},  # a fixed(16) uuid stays binary
}


@dataclass(frozen=True)
class AvroMapping:
    """An Avro schema's Arrow type, how to read it and how to adapt fastavro's values."""

    arrow_type: pa.DataType
    is_record: bool
    reader_schema: Any  # fastavro-parsed writer schema with rewritten logical types
    adapter: Adapter | None  # fastavro value -> Arrow storage value; None = as is


# Debezium's temporal types (time.precision.mode adaptive, the default, or
# adaptive_time_microseconds) are plain ints and longs named by `connect.name`; in a change
# event (`debezium_types`) they map as the Avro logical type of the same meaning: a
# PostgreSQL `timestamp` is a wall-clock time, `date` days, `time` a time of day.
DEBEZIUM_TEMPORAL: dict[str, str] = {
    "io.debezium.time.Date": "date",
    "io.debezium.time.Time": "time-millis",
    "io.debezium.time.MicroTime": "time-micros",
    "io.debezium.time.Timestamp": "local-timestamp-millis",
    "io.debezium.time.MicroTimestamp": "local-timestamp-micros",
    "io.debezium.time.NanoTimestamp": "local-timestamp-nanos",
}


def _debezium_logical_types(schema: Any) -> Any:
    """`schema` with Debezium's temporal types given their Avro logical type."""
    if isinstance(schema, list):
        return [_debezium_logical_types(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    logical = DEBEZIUM_TEMPORAL.get(str(schema.get("connect.name")))
    if logical is not None and "logicalType" not in schema:
        schema = {**schema, "logicalType": logical}
    if "fields" in schema:
        schema = {
            **schema,
            "fields": [{**f, "type": _debezium_logical_types(f["type"])} for f in schema["fields"]],
        }
    for key in ("items", "values", "type"):
        if isinstance(schema.get(key), dict | list):
            schema = {**schema, key: _debezium_logical_types(schema[key])}
    return schema


def map_avro_schema(schema_text: str, debezium_types: bool = False) -> AvroMapping:
    """Map an Avro schema (registry text) to Arrow; raises SchemaMappingError.
    `debezium_types`: a change event's schema, whose Debezium temporal types map as
    their logical types (DEBEZIUM_TEMPORAL)."""
    try:
        schema = json.loads(schema_text)
    except json.JSONDecodeError:
        schema = schema_text  # a bare primitive name such as `string`
    except RecursionError:
        raise SchemaMappingError(f"the schema nests more than {MAX_DEPTH} levels deep") from None
    if debezium_types:
        schema = _debezium_logical_types(schema)
    walker = _AvroWalker()
    arrow_type, adapter = walker.visit(schema, namespace="", path="")
    # Named types are mapped once and shared: the walk is linear, the expansion is not.
    check_expansion(arrow_type)
    rewritten = _rewrite_logical_types(copy.deepcopy(schema))
    try:
        reader_schema = fastavro.parse_schema(rewritten)
    except Exception as exc:  # fastavro raises several types for invalid schemas
        raise SchemaMappingError(f"invalid Avro schema: {exc}") from exc
    is_record = isinstance(schema, dict) and schema.get("type") == "record"
    return AvroMapping(arrow_type, is_record, reader_schema, adapter)


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


class _AvroWalker:
    def __init__(self) -> None:
        self.named: dict[str, tuple[pa.DataType, Adapter | None, dict[str, Any]]] = {}
        self.in_progress: set[str] = set()
        self.budget = ExpansionBudget()

    def visit(self, schema: Any, namespace: str, path: str) -> tuple[pa.DataType, Adapter | None]:
        # Definitions nest as deep as the types they write out (Python's stack).
        with self.budget.walking(path):
            return self._visit(schema, namespace, path)

    def _visit(self, schema: Any, namespace: str, path: str) -> tuple[pa.DataType, Adapter | None]:
        if isinstance(schema, list):
            return self._union(schema, namespace, path)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema], None
            name = _full_name(schema, namespace)
            if name not in self.named and schema in self.named:
                name = schema
            if name in self.in_progress:
                raise SchemaMappingError(
                    f"recursive Avro type {name!r} at {path or '<root>'}: "
                    "Iceberg tables cannot hold recursive types"
                )
            if name not in self.named:
                raise SchemaMappingError(f"unknown Avro type {schema!r} at {path or '<root>'}")
            arrow_type, adapter, _ = self.named[name]
            return arrow_type, adapter
        if not isinstance(schema, dict):
            raise SchemaMappingError(f"invalid Avro schema at {path or '<root>'}: {schema!r}")
        return self._complex(schema, namespace, path)

    def _complex(
        self, schema: dict[str, Any], namespace: str, path: str
    ) -> tuple[pa.DataType, Adapter | None]:
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if logical == "decimal" and kind in ("bytes", "fixed"):
            result = _decimal_type(schema, path)
            if kind == "fixed":
                self._register(schema, namespace, result)
            return result
        if (
            isinstance(logical, str)
            and logical in _TEMPORAL_LOGICAL
            and kind in _LOGICAL_BASES.get(logical, {"long"})
        ):
            return _TEMPORAL_LOGICAL[logical][0], None
        if kind == "record" or kind == "error":
            return self._record(schema, namespace, path)
        if kind == "enum":
            return self._register(schema, namespace, (pa.string(), None))
        if kind == "fixed":
            return self._register(schema, namespace, (pa.binary(), None))
        if kind == "array":
            item_type, item_adapter = self.visit(schema["items"], namespace, f"{path}[]")
            return pa.list_(pa.field("element", item_type)), _list_adapter(item_adapter)
        if kind == "map":
            value_type, value_adapter = self.visit(schema["values"], namespace, f"{path}{{}}")
            return (
                pa.map_(
                    pa.field("key", pa.string(), nullable=False), pa.field("value", value_type)
                ),
                _map_adapter(value_adapter),
            )
        if isinstance(kind, str | list | dict):
            return self.visit(kind, namespace, path)  # {"type": "string"} or unknown logical type
        raise SchemaMappingError(f"invalid Avro schema at {path or '<root>'}: {schema!r}")

    def _register(
        self, schema: dict[str, Any], namespace: str, result: tuple[pa.DataType, Adapter | None]
    ) -> tuple[pa.DataType, Adapter | None]:
        name = _full_name(schema["name"], schema.get("namespace", namespace))
        self.named[name] = (result[0], result[1], schema)
        return result

    def _record(
        self, schema: dict[str, Any], namespace: str, path: str
    ) -> tuple[pa.DataType, Adapter | None]:
        name = _full_name(schema["name"], schema.get("namespace", namespace))
        record_namespace = name.rpartition(".")[0]
        self.in_progress.add(name)
        fields: list[pa.Field] = []
        adapters: dict[str, Adapter] = {}
        for field in schema.get("fields", []):
            field_path = f"{path}.{field['name']}" if path else field["name"]
            field_type, field_adapter = self.visit(field["type"], record_namespace, field_path)
            fields.append(
                pa.field(
                    field["name"],
                    field_type,
                    nullable=True,
                    metadata=None if _avro_nullable(field["type"]) else DECLARED_NOT_NULL,
                )
            )
            if field_adapter is not None:
                adapters[field["name"]] = field_adapter
        self.in_progress.discard(name)
        result = (pa.struct(fields), _record_adapter(adapters))
        self.named[name] = (result[0], result[1], schema)
        return result

    def _union(
        self, branches: list[Any], namespace: str, path: str
    ) -> tuple[pa.DataType, Adapter | None]:
        non_null = [b for b in branches if b != "null"]
        if not non_null:
            return pa.string(), None
        if len(non_null) == 1:
            arrow_type, adapter = self.visit(non_null[0], namespace, path)
            return arrow_type, _nullable(adapter)
        # Like Spark's Avro reader: [int, long] -> long, [float, double] -> double.
        if all(b in ("int", "long") for b in non_null):
            return pa.int64(), None
        if all(b in ("float", "double") for b in non_null):
            return pa.float64(), None
        members = [self.visit(b, namespace, f"{path}.member{i}") for i, b in enumerate(non_null)]
        struct_type = pa.struct(
            [pa.field(f"member{i}", t, nullable=True) for i, (t, _) in enumerate(members)]
        )
        matchers = [self._branch_matcher(b, namespace) for b in non_null]
        return struct_type, _union_adapter(matchers, [a for _, a in members], path)

    def _branch_matcher(self, branch: Any, namespace: str) -> Callable[[Any], bool]:
        """Which union branch a fastavro value came from (records arrive as (name, value))."""
        kind, full_name = self._branch_kind(branch, namespace)
        if kind in ("record", "error"):
            return lambda v: (isinstance(v, tuple) and v[0] == full_name) or isinstance(v, dict)
        return _VALUE_MATCHERS.get(kind, lambda v: False)

    def _branch_kind(self, branch: Any, namespace: str) -> tuple[str, str | None]:
        if isinstance(branch, str):
            if branch in _PRIMITIVES:
                return branch, None
            full = _full_name(branch, namespace)
            full = full if full in self.named else branch
            return self._branch_kind(self.named[full][2], full.rpartition(".")[0])
        kind = branch.get("type")
        if isinstance(kind, dict | list):
            return self._branch_kind(kind, namespace)
        if branch.get("logicalType") == "decimal":
            return "decimal", None
        if kind in ("record", "error", "enum", "fixed"):
            return kind, _full_name(branch["name"], branch.get("namespace", namespace))
        return str(kind), None


_VALUE_MATCHERS: dict[str, Callable[[Any], bool]] = {
    "boolean": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, float),
    "double": lambda v: isinstance(v, float),
    "string": lambda v: isinstance(v, str),
    "enum": lambda v: isinstance(v, str),
    "bytes": lambda v: isinstance(v, bytes),
    "fixed": lambda v: isinstance(v, bytes),
    "decimal": lambda v: isinstance(v, decimal.Decimal),
    "array": lambda v: isinstance(v, list),
    "map": lambda v: isinstance(v, dict),
}


def _decimal_type(schema: dict[str, Any], path: str) -> tuple[pa.DataType, Adapter | None]:
    precision = int(schema["precision"])
    scale = int(schema.get("scale", 0))
    if precision > MAX_ICEBERG_DECIMAL_PRECISION:
        # Iceberg decimals stop at 38 digits: keep the exact value as text.
        return pa.string(), _nullable(str)
    if scale > precision:
        raise SchemaMappingError(f"decimal at {path}: scale {scale} > precision {precision}")
    return pa.decimal128(precision, scale), None


def _avro_nullable(field_type: Any) -> bool:
    """An Avro field type that admits null: `null` or a union with a `null` branch."""
    if isinstance(field_type, list):
        return any(_avro_nullable(branch) for branch in field_type)
    return field_type == "null" or (
        isinstance(field_type, dict) and field_type.get("type") == "null"
    )


def _nullable(adapter: Adapter | None) -> Adapter | None:
    if adapter is None:
        return None
    return lambda v: None if v is None else adapter(v)


def _list_adapter(item: Adapter | None) -> Adapter | None:
    if item is None:
        return None
    return lambda v: [item(x) for x in v]


def _map_adapter(value: Adapter | None) -> Adapter | None:
    if value is None:
        return None
    return lambda v: {k: value(x) for k, x in v.items()}


def _record_adapter(adapters: dict[str, Adapter]) -> Adapter | None:
    if not adapters:
        return None
    items = tuple(adapters.items())

    def adapt(record: Any) -> Any:
        if isinstance(record, tuple):  # (record name, value) from a multi-record union
            record = record[1]
        out = dict(record)
        for name, adapter in items:
            if name in out:
                out[name] = adapter(out[name])
        return out

    return adapt


def _union_adapter(
    matchers: list[Callable[[Any], bool]], adapters: list[Adapter | None], path: str
) -> Adapter:
    members = [f"member{i}" for i in range(len(matchers))]

    def adapt(value: Any) -> Any:
        if value is None:
            return None
        for member, matches, adapter in zip(members, matchers, adapters, strict=True):
            if matches(value):
                if isinstance(value, tuple):
                    value = value[1]
                return {member: adapter(value) if adapter is not None else value}
        raise ValueError(f"value of type {type(value).__name__} matches no branch of union {path}")

    return adapt


def _rewrite_logical_types(schema: Any) -> Any:
    """Make fastavro return temporal/uuid values as plain numbers/text (see module doc)."""
    if isinstance(schema, list):
        return [_rewrite_logical_types(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    logical = schema.get("logicalType")
    if isinstance(logical, str) and logical in _TEMPORAL_LOGICAL:
        replacement = _TEMPORAL_LOGICAL[logical][1]
        if replacement is None:
            schema.pop("logicalType")
        else:
            schema["logicalType"] = replacement
    for key in ("fields",):
        if key in schema:
            for field in schema[key]:
                field["type"] = _rewrite_logical_types(field["type"])
    for key in ("items", "values"):
        if key in schema:
            schema[key] = _rewrite_logical_types(schema[key])
    if isinstance(schema.get("type"), dict | list):
        schema["type"] = _rewrite_logical_types(schema["type"])
    return schema
