"""Avro schema compatibility, following Avro's schema-resolution rules (pure logic).

`can_read(writer, reader)` answers: can data written with `writer` be decoded with
`reader`? Compatibility levels are defined on top of it, as in Confluent:

- BACKWARD: the new schema reads data written with the previous one.
- FORWARD: the previous schema reads data written with the new one.
- FULL: both. `*_TRANSITIVE`: against every earlier version, not only the latest.

JSON Schema and Protobuf subjects are not checked (NONE semantics); see docs/schema-registry.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tableflow_core.registry.errors import invalid_compatibility_level

# Writer type -> reader types that can read it (Avro spec, "Schema Resolution").
_PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class CompatibilityLevel(StrEnum):
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"
    NONE = "NONE"

    @classmethod
    def parse(cls, value: object) -> CompatibilityLevel:
        if isinstance(value, str):
            try:
                return cls(value.upper())
            except ValueError:
                pass
        raise invalid_compatibility_level(value)

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def checks_backward(self) -> bool:
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def checks_forward(self) -> bool:
        return self.value.startswith(("FORWARD", "FULL"))


@dataclass(frozen=True)
class ParsedAvro:
    """A schema parsed by fastavro plus the named types it (and its references) define."""

    schema: Any
    named: dict[str, Any]


@dataclass(frozen=True)
class Incompatibility:
    error_type: str
    path: str
    description: str

    def __str__(self) -> str:
        return f"{{errorType:'{self.error_type}', path:'{self.path}', description:'{self.description}'}}"


def can_read(writer: ParsedAvro, reader: ParsedAvro) -> list[Incompatibility]:
    """Everything that stops `reader` from decoding data written with `writer` (empty = OK)."""
    return _Resolver(writer.named, reader.named).check(writer.schema, reader.schema, "")


def check_level(
    level: CompatibilityLevel, candidate: ParsedAvro, existing: list[ParsedAvro]
) -> list[str]:
    """Messages describing why `candidate` breaks `level` against `existing` (oldest first)."""
    if level is CompatibilityLevel.NONE or not existing:
        return []
    targets = existing if level.transitive else existing[-1:]
    messages: list[str] = []
    for previous in reversed(targets):
        if level.checks_backward:
            messages += [
                f"BACKWARD: new schema cannot read data written with an earlier one: {problem}"
                for problem in can_read(writer=previous, reader=candidate)
            ]
        if level.checks_forward:
            messages += [
                f"FORWARD: an earlier schema cannot read data written with the new one: {problem}"
                for problem in can_read(writer=candidate, reader=previous)
            ]
    return messages


# Problems kept per check: a problem deep inside a named type reused many times would
# otherwise be reported once per path to it.
MAX_PROBLEMS = 50


class _Resolver:
    """Checks writer against reader, each pair of named record types once (memoized).

    Without the memo, a record type referenced by two fields of a record that is itself
    referenced twice (and so on) is checked 2^depth times.
    """

    def __init__(self, writer_named: dict[str, Any], reader_named: dict[str, Any]) -> None:
        self._writer_named = writer_named
        self._reader_named = reader_named
        self._in_progress: set[tuple[str, str]] = set()  # recursive named types
        # (writer name, reader name) -> problems with paths relative to the record
        self._records: dict[tuple[str, str], list[Incompatibility]] = {}

    def check(self, writer: Any, reader: Any, path: str) -> list[Incompatibility]:
        writer = _resolve(writer, self._writer_named)
        reader = _resolve(reader, self._reader_named)
        if isinstance(reader, list):
            return self._check_reader_union(writer, reader, path)
        if isinstance(writer, list):
            problems = []
            for index, branch in enumerate(writer):
                if self.check(branch, reader, f"{path}/{index}"):
                    problems.append(
                        Incompatibility(
                            "MISSING_UNION_BRANCH",
                            f"{path}/{index}",
                            f"reader type {_type_of(reader)} cannot read writer union "
                            f"branch {_type_of(branch)}",
                        )
                    )
            return problems
        writer_type, reader_type = _type_of(writer), _type_of(reader)
        if writer_type != reader_type:
            if reader_type in _PROMOTIONS.get(writer_type, frozenset()):
                return []
            return [
                Incompatibility(
                    "TYPE_MISMATCH",
                    path or "/",
                    f"reader type {reader_type} does not match writer type {writer_type}",
                )
            ]
        if writer_type in _PRIMITIVES:
            return _check_decimal(writer, reader, path)
        if writer_type == "array":
            return self.check(writer["items"], reader["items"], f"{path}/items")
        if writer_type == "map":
            return self.check(writer["values"], reader["values"], f"{path}/values")
        name_problem = _check_name(writer, reader, path)
        if name_problem:
            return [name_problem]
        if writer_type == "fixed":
            if writer["size"] != reader["size"]:
                return [
                    Incompatibility(
                        "FIXED_SIZE_MISMATCH",
                        f"{path}/size",
                        f"expected {writer['size']}, found {reader['size']}",
                    )
                ]
            return _check_decimal(writer, reader, path)
        if writer_type == "enum":
            return _check_enum(writer, reader, path)
        return self._check_record(writer, reader, path)

    def _check_reader_union(
        self, writer: Any, reader: list[Any], path: str
    ) -> list[Incompatibility]:
        writer_branches = writer if isinstance(writer, list) else [writer]
        problems = []
        for index, branch in enumerate(writer_branches):
            if any(not self.check(branch, option, path) for option in reader):
                continue
            branch_path = f"{path}/{index}" if isinstance(writer, list) else path or "/"
            same_kind = self._same_kind_option(branch, reader)
            if same_kind is not None:  # e.g. a nested record that changed: say what changed
                problems += self.check(branch, same_kind, branch_path)
            else:
                problems.append(
                    Incompatibility(
                        "MISSING_UNION_BRANCH",
                        branch_path,
                        f"reader union lacks a branch that reads writer type {_type_of(branch)}",
                    )
                )
        return problems

    def _same_kind_option(self, writer: Any, options: list[Any]) -> Any | None:
        writer = _resolve(writer, self._writer_named)
        for option in options:
            option = _resolve(option, self._reader_named)
            if _type_of(option) != _type_of(writer):
                continue
            if not isinstance(writer, dict) or "name" not in writer:
                return option
            if _short(option.get("name", "")) == _short(writer["name"]):
                return option
        return None

    def _check_record(self, writer: Any, reader: Any, path: str) -> list[Incompatibility]:
        key = (writer["name"], reader["name"])
        if key in self._in_progress:
            return []  # recursion: assume compatible, the outer frame checks the rest
        if key not in self._records:
            self._records[key] = self._check_record_fields(writer, reader, key)[:MAX_PROBLEMS]
        return [
            Incompatibility(p.error_type, path + p.path, p.description) for p in self._records[key]
        ]

    def _check_record_fields(
        self, writer: Any, reader: Any, key: tuple[str, str]
    ) -> list[Incompatibility]:
        path = ""
        self._in_progress.add(key)
        try:
            writer_fields = {f["name"]: f for f in writer.get("fields", [])}
            problems: list[Incompatibility] = []
            for index, reader_field in enumerate(reader.get("fields", [])):
                field_path = f"{path}/fields/{index}"
                names = [reader_field["name"], *reader_field.get("aliases", [])]
                writer_field = next((writer_fields[n] for n in names if n in writer_fields), None)
                if writer_field is not None:
                    problems += self.check(
                        writer_field["type"], reader_field["type"], f"{field_path}/type"
                    )
                elif "default" not in reader_field:
                    problems.append(
                        Incompatibility(
                            "READER_FIELD_MISSING_DEFAULT_VALUE",
                            field_path,
                            f"field '{reader_field['name']}' has no default value and is "
                            "missing in the writer schema",
                        )
                    )
            return problems
        finally:
            self._in_progress.discard(key)


def _resolve(schema: Any, named: dict[str, Any]) -> Any:
    """Replace a reference to a named type by its definition; unwrap {"type": "int"}."""
    if isinstance(schema, str):
        return named.get(schema, schema)
    if isinstance(schema, dict) and isinstance(schema.get("type"), str):
        type_name = schema["type"]
        if type_name in _PRIMITIVES and "logicalType" not in schema:
            return type_name
        if type_name in named and type_name not in _PRIMITIVES:
            return named[type_name]
    return schema


def _type_of(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return str(schema.get("type"))


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _check_name(writer: Any, reader: Any, path: str) -> Incompatibility | None:
    writer_name, reader_name = writer.get("name", ""), reader.get("name", "")
    aliases = {*reader.get("aliases", []), *(_short(a) for a in reader.get("aliases", []))}
    if writer_name == reader_name or writer_name in aliases or _short(writer_name) in aliases:
        return None
    if _short(writer_name) == _short(reader_name):
        return None  # Confluent resolves unqualified names; namespaces often drift in practice
    return Incompatibility(
        "NAME_MISMATCH", f"{path}/name", f"expected {writer_name}, found {reader_name}"
    )


def _check_enum(writer: Any, reader: Any, path: str) -> list[Incompatibility]:
    if "default" in reader:
        return []
    missing = [s for s in writer.get("symbols", []) if s not in reader.get("symbols", [])]
    if not missing:
        return []
    return [
        Incompatibility(
            "MISSING_ENUM_SYMBOLS",
            f"{path}/symbols",
            f"reader enum {reader.get('name')} lacks symbols {missing} and has no default",
        )
    ]


def _check_decimal(writer: Any, reader: Any, path: str) -> list[Incompatibility]:
    if not (isinstance(writer, dict) and isinstance(reader, dict)):
        return []
    if writer.get("logicalType") != "decimal" or reader.get("logicalType") != "decimal":
        return []
    writer_ps = (writer.get("precision"), writer.get("scale", 0))
    reader_ps = (reader.get("precision"), reader.get("scale", 0))
    if writer_ps == reader_ps:
        return []
    return [
        Incompatibility(
            "TYPE_MISMATCH",
            path or "/",
            f"decimal(precision, scale) {reader_ps} does not match writer's {writer_ps}",
        )
    ]
