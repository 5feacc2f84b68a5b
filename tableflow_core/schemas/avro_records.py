"""Compiled readers for flat Avro records: one generated Python function per writer schema.

fastavro's `schemaless_reader` interprets the schema for every record (a dict lookup and
a `read(1)` call per field byte) and returns a dict the caller then takes apart column
by column. For the common case, a record whose fields are primitives, enums and
`[null, X]` unions, a function generated from the schema reads the bytes directly and
returns the values of the table's columns as a tuple: about twice as fast, and the
columns go to Arrow without a dict per row.

The generated code reads exactly what fastavro reads (same values, same logical-type
rewrites of `avro_types`), and is stricter where fastavro reads garbage: a negative or
out-of-range union/enum index or an over-long varint is a corrupt record. Everything
else (nested records, arrays, maps, fixed, decimals, general unions, values that need an
adapter) is not compiled: `compile_record_reader` returns None and the caller uses
fastavro.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import fastavro

from tableflow_core.errors import TableflowError
from tableflow_core.schemas import avro_types

RecordReader = Callable[[bytes, int], tuple[Any, ...]]

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
# The logical-type readers avro_types registers with fastavro, as Python expressions.
_LOGICAL = {
    f"long-{avro_types.MILLIS_TO_MICROS}": "{v} * 1000",
    f"int-{avro_types.MILLIS_TO_MICROS}": "{v} * 1000",
    f"long-{avro_types.NANOS_TO_MICROS}": "{v} // 1000",
}
_MAX_VARINT_BYTES = 10  # a 64-bit zigzag varint


class TrailingBytes(TableflowError, ValueError):
    """The record's fields end before its bytes do."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


def logical_rewrite(schema: dict[str, Any], kind: str) -> tuple[bool, str | None]:
    """Whether a primitive `schema` of `kind` is read here, and the logical-type rewrite
    applied to its value (a key of `_LOGICAL`), if any: fastavro applies the reader
    registered for "<type>-<logicalType>"; one that builds a value (decimal) is not read."""
    logical = f"{kind}-{schema['logicalType']}" if schema.get("logicalType") else None
    if logical not in fastavro.read.LOGICAL_READERS:
        return True, None
    return logical in _LOGICAL, logical


def _bad_index(kind: str, index: int, size: int) -> ValueError:
    return ValueError(f"{kind} index {index} out of range (0..{size - 1})")


class _Compiler:
    """Python source for one record; `None` from `field` means: cannot compile."""

    def __init__(self, named: dict[str, Any]) -> None:
        self.named = named
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def constant(self, value: Any) -> str:
        name = f"_c{len(self.constants)}"
        self.constants[name] = value
        return name

    def varint(self, indent: int, target: str) -> None:
        """Inline zigzag varint (a call per value would cost more than the read)."""
        emit = self.emit
        emit(indent, "b = data[p]")
        emit(indent, "p += 1")
        emit(indent, "if b < 128:")
        emit(indent + 1, f"{target} = (b >> 1) ^ -(b & 1)")
        emit(indent, "else:")
        emit(indent + 1, "z = b & 127")
        emit(indent + 1, "s = 7")
        emit(indent + 1, "b = data[p]")
        emit(indent + 1, "p += 1")
        emit(indent + 1, "while b >= 128:")
        emit(indent + 2, "z |= (b & 127) << s")
        emit(indent + 2, "s += 7")
        emit(indent + 2, "if s > 63:")
        emit(indent + 3, f"raise ValueError('varint longer than {_MAX_VARINT_BYTES} bytes')")
        emit(indent + 2, "b = data[p]")
        emit(indent + 2, "p += 1")
        emit(indent + 1, "z |= b << s")
        emit(indent + 1, f"{target} = (z >> 1) ^ -(z & 1)")

    def read(self, schema: Any, indent: int, target: str) -> bool:
        """Emit code reading `schema` into `target`; False when not supported."""
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            schema = self.named.get(schema)
            if not isinstance(schema, dict) or schema.get("type") != "enum":
                return False
        if isinstance(schema, list):
            return self.union(schema, indent, target)
        if isinstance(schema, dict):
            kind = schema.get("type")
            if kind == "enum":
                symbols = self.constant(tuple(schema["symbols"]))
                self.varint(indent, "i")
                self.emit(indent, f"if not 0 <= i < {len(schema['symbols'])}:")
                self.emit(indent + 1, f"raise bad_index('enum', i, {len(schema['symbols'])})")
                self.emit(indent, f"{target} = {symbols}[i]")
                return True
            if not isinstance(kind, str) or kind not in _PRIMITIVES:
                return False
            supported, logical = logical_rewrite(schema, kind)
            if not supported or not self.primitive(kind, indent, target):
                return False
            if logical is not None:
                self.emit(indent, f"{target} = {_LOGICAL[logical].format(v=target)}")
            return True
        return isinstance(schema, str) and self.primitive(schema, indent, target)

    def primitive(self, kind: str, indent: int, target: str) -> bool:
        if kind == "null":
            self.emit(indent, f"{target} = None")
        elif kind in ("int", "long"):
            self.varint(indent, target)
        elif kind == "boolean":
            self.emit(indent, f"{target} = data[p] != 0")
            self.emit(indent, "p += 1")
        elif kind == "double":
            self.emit(indent, f"{target} = unpack_double(data, p)[0]")
            self.emit(indent, "p += 8")
        elif kind == "float":
            self.emit(indent, f"{target} = unpack_float(data, p)[0]")
            self.emit(indent, "p += 4")
        else:  # string, bytes
            self.varint(indent, "size")
            self.emit(indent, "end = p + size")
            self.emit(indent, "if size < 0 or end > n:")
            self.emit(indent + 1, f"raise EOFError(f'expected {{size}} bytes of {kind}')")
            decode = ".decode()" if kind == "string" else ""
            self.emit(indent, f"{target} = data[p:end]{decode}")
            self.emit(indent, "p = end")
        return True

    def union(self, branches: list[Any], indent: int, target: str) -> bool:
        if len(branches) != 2 or "null" not in branches:
            return False  # general unions become structs through an adapter
        self.varint(indent, "i")
        for index, branch in enumerate(branches):
            self.emit(indent, f"{'if' if index == 0 else 'elif'} i == {index}:")
            if not self.read(branch, indent + 1, target):
                return False
        self.emit(indent, "else:")
        self.emit(indent + 1, "raise bad_index('union', i, 2)")
        return True


def compile_record_reader(
    mapping: avro_types.AvroMapping, columns: Sequence[str]
) -> RecordReader | None:
    """A function (framed record bytes, payload start) -> the values of `columns` (None for a
    column the writer schema lacks), or None when the schema is not a flat record.

    The function raises TrailingBytes, IndexError, struct.error, ValueError, EOFError or
    UnicodeDecodeError for a record its schema cannot read.
    """
    schema = mapping.reader_schema
    if not mapping.is_record or mapping.adapter is not None or not isinstance(schema, dict):
        return None
    compiler = _Compiler(schema.get("__named_schemas", {}))
    wanted = {name: i for i, name in enumerate(columns)}
    values = ["None"] * len(columns)
    compiler.emit(1, "n = len(data)")
    for field_index, field in enumerate(schema["fields"]):
        target = f"v{field_index}"
        if not compiler.read(field["type"], 1, target):
            return None
        if field["name"] in wanted:
            values[wanted[field["name"]]] = target
    compiler.emit(1, "if p != n:")
    compiler.emit(2, "raise TrailingBytes(n - p)")
    compiler.emit(1, f"return ({', '.join(values)}{',' if len(values) == 1 else ''})")
    source = "def read(data, p):\n" + "\n".join(compiler.lines) + "\n"
    namespace: dict[str, Any] = {
        "bad_index": _bad_index,
        "unpack_double": struct.Struct("<d").unpack_from,
        "unpack_float": struct.Struct("<f").unpack_from,
        "TrailingBytes": TrailingBytes,
        **compiler.constants,
    }
    # No text of the schema goes into the source (names and symbols are in `namespace`
    # constants; fields are v0, v1, ...), so a registry schema cannot inject code.
    exec(compile(source, "<avro record reader>", "exec"), namespace)
    reader: RecordReader = namespace["read"]
    return reader
