"""Many flat Avro records of one writer schema decoded at once, field by field (numpy).

The compiled reader (`avro_records`) reads a record per call: ~2.5-3.5 us for the
10-field event, most of a small upsert batch's decode. Here a chunk's payloads of one
schema id are joined into one buffer and read a field at a time over every record: each
step reads the field at every record's position, checks that it stays inside that
record, and moves the positions on. When every record's last field ends exactly at its
last byte (each record's length proves where it ends), the values are those the compiled
reader gives, already as Arrow arrays of the columns' storage types.

The answer is None, and the caller reads the records one by one where a bad one is named,
for anything the compiled reader would refuse (a truncated field, an index out of range,
trailing bytes, a varint over 10 bytes) and for values whose conversion it leaves to Arrow
(beyond 64 bits, beyond the column's integer range, a timestamp beyond int64 once scaled,
text that is not UTF-8). So a chunk gets the same rows, or the same failures, either way.
Schemas or columns this module does not read (a union other than `[null, X]`, a
`double` into a `float` column, ...) get no reader at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from tableflow_core.schemas import avro_records, avro_types
from tableflow_core.schemas.avro_varints import NotProven, joined, zigzag_at

ColumnsReader = Callable[[Sequence[bytes], bytes], "list[pa.Array] | None"]

_NUMBERS = {"int", "long", "float", "double", "boolean"}
_TEXT = {"string", "bytes"}
# The logical-type rewrites avro_records reads as `{v} * 1000` and `{v} // 1000`.
_SCALES = {
    f"long-{avro_types.MILLIS_TO_MICROS}": ("mul", 1000),
    f"int-{avro_types.MILLIS_TO_MICROS}": ("mul", 1000),
    f"long-{avro_types.NANOS_TO_MICROS}": ("div", 1000),
}
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class _Field:
    """How one writer field is read: its Avro kind ("enum", "string", "long", ...), the
    null branch of a `[null, X]` union, an enum's symbols, a logical rewrite."""

    kind: str
    null_branch: int | None = None
    symbols: tuple[str, ...] = ()
    scale: tuple[str, int] | None = None


def _plain(schema: Any, named: dict[str, Any]) -> _Field | None:
    """A field type that is not a union, as a _Field; None when not read here."""
    if isinstance(schema, str) and schema not in _NUMBERS | _TEXT:
        schema = named.get(schema)
    if isinstance(schema, str):
        return _Field(schema)
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind == "enum":
        return _Field("enum", symbols=tuple(schema["symbols"]))
    if not isinstance(kind, str) or kind not in _NUMBERS | _TEXT:
        return None
    supported, logical = avro_records.logical_rewrite(schema, kind)
    if not supported:
        return None
    if logical is None:
        return _Field(kind)
    scale = _SCALES.get(logical)
    return None if scale is None else _Field(kind, scale=scale)


def _field(schema: Any, named: dict[str, Any]) -> _Field | None:
    if isinstance(schema, list):
        if len(schema) != 2 or "null" not in schema or schema[0] == schema[1]:
            return None
        null_branch = schema.index("null")
        value = _plain(schema[1 - null_branch], named)
        if value is None:
            return None
        return _Field(value.kind, null_branch, value.symbols, value.scale)
    return _plain(schema, named)


def _fits(field: _Field, storage: pa.DataType) -> bool:
    """Whether the compiled reader's values of `field` go into `storage` as they are."""
    if field.kind in ("int", "long"):
        return pa.types.is_signed_integer(storage)
    if field.kind == "float":
        return storage in (pa.float32(), pa.float64())
    if field.kind == "double":
        return storage == pa.float64()
    if field.kind == "boolean":
        return storage == pa.bool_()
    if field.kind in ("string", "enum"):
        return storage == pa.string()
    return field.kind == "bytes" and storage == pa.binary()


def compile_columns_reader(
    mapping: avro_types.AvroMapping, columns: Sequence[str], types: Sequence[pa.DataType]
) -> ColumnsReader | None:
    """A function (payloads framed by `frame`, that frame) -> the arrays of `columns` (of
    `types`), or None when some record is not proven clean; None when the writer schema
    or a column is not read here (the compiled reader's domain, narrowed)."""
    schema = mapping.reader_schema
    if not mapping.is_record or mapping.adapter is not None or not isinstance(schema, dict):
        return None
    named = schema.get("__named_schemas", {})
    storage = dict(zip(columns, types, strict=True))
    steps: list[tuple[_Field, str | None]] = []
    for writer_field in schema["fields"]:
        field = _field(writer_field["type"], named)
        name = writer_field["name"]
        wanted = name if name in storage else None
        if field is None or (wanted is not None and not _fits(field, storage[name])):
            return None
        steps.append((field, wanted))

    def read(payloads: Sequence[bytes], frame: bytes) -> list[pa.Array] | None:
        try:
            found = _read_all(payloads, frame, steps, storage)
        except NotProven:
            return None
        return [found[c] if c in found else pa.nulls(len(payloads), storage[c]) for c in columns]

    return read


def _read_all(
    payloads: Sequence[bytes],
    frame: bytes,
    steps: Sequence[tuple[_Field, str | None]],
    storage: dict[str, pa.DataType],
) -> dict[str, pa.Array]:
    n = len(payloads)
    data, at, end = joined(payloads, frame)
    found: dict[str, pa.Array] = {}
    for field, column in steps:
        present: np.ndarray | None = None
        if field.null_branch is None:
            value, at = _read(field, data, at, end)
        else:
            branch, at = zigzag_at(data, at, end)
            if not ((branch == 0) | (branch == 1)).all():
                raise NotProven
            present = branch != field.null_branch
            value, after = _read(field, data, at[present], end[present])
            at = at.copy()
            at[present] = after
        if column is not None:
            found[column] = _arrow(field, value, present, n, storage[column])
    if not np.array_equal(at, end):
        raise NotProven  # trailing bytes
    return found


def _fixed(data: np.ndarray, at: np.ndarray, end: np.ndarray, size: int) -> np.ndarray:
    """The `size` bytes at each of `at`, a row each."""
    if len(at) and (at + size > end).any():
        raise NotProven
    return data[at[:, None] + np.arange(size)]


def _read(
    field: _Field, data: np.ndarray, at: np.ndarray, end: np.ndarray
) -> tuple[Any, np.ndarray]:
    """`field`'s values at `at` (a numpy array; for text, (sizes, their bytes one after
    the other)), and the positions after them."""
    kind = field.kind
    if kind in ("int", "long", "enum"):
        value, after = zigzag_at(data, at, end)
        if (
            kind == "enum"
            and len(value)
            and not ((value >= 0) & (value < len(field.symbols))).all()
        ):
            raise NotProven
        return _scaled(value, field.scale), after
    if kind == "boolean":
        return _fixed(data, at, end, 1)[:, 0] != 0, at + 1
    if kind in ("float", "double"):
        width = 4 if kind == "float" else 8
        raw = np.ascontiguousarray(_fixed(data, at, end, width))
        return raw.view("<f4" if kind == "float" else "<f8").reshape(len(at)), at + width
    sizes, at = zigzag_at(data, at, end)  # string, bytes
    if len(at) and ((sizes < 0) | (sizes > end - at)).any():  # no at + size: it may overflow
        raise NotProven
    offsets = np.zeros(len(at) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    # Every value's bytes, one after the other: value i's from at[i], at offsets[i].
    gather = np.repeat(at - offsets[:-1], sizes) + np.arange(int(offsets[-1]))
    return (sizes, data[gather]), at + sizes


def _scaled(value: np.ndarray, scale: tuple[str, int] | None) -> np.ndarray:
    if scale is None:
        return value
    how, factor = scale
    if how == "div":
        return value // factor
    if len(value) and (np.abs(value) > _INT64_MAX // factor).any():
        raise NotProven  # beyond int64 once scaled: Arrow refuses it, record by record
    return value * factor


def _arrow(
    field: _Field, value: Any, present: np.ndarray | None, n: int, storage: pa.DataType
) -> pa.Array:
    """The column of `n` rows: `value` at the rows `present` (all when None), null at
    the others."""
    if field.kind in _TEXT:
        return _text(value, present, n, storage)
    full = value
    if present is not None:
        full = np.zeros(n, value.dtype)
        full[present] = value
    if field.kind == "enum":
        indexes = _from_numpy(full, present, pa.int64())
        return pa.array(list(field.symbols), pa.string()).take(indexes)
    if field.kind in ("int", "long"):
        limits = np.iinfo(f"int{storage.bit_width}")
        if len(full) and ((full < limits.min) | (full > limits.max)).any():
            raise NotProven  # beyond the column's range: a bad record, named one by one
    return _from_numpy(full, present, storage)


def _validity(present: np.ndarray | None) -> tuple[pa.Buffer | None, int]:
    if present is None:
        return None, 0
    return pa.py_buffer(np.packbits(present, bitorder="little")), int(
        len(present) - np.count_nonzero(present)
    )


def _from_numpy(values: np.ndarray, present: np.ndarray | None, storage: pa.DataType) -> pa.Array:
    """A fixed-width column of `storage` from its values and where they are present."""
    if storage == pa.bool_():
        data = np.packbits(values.astype(bool), bitorder="little")
    elif pa.types.is_integer(storage):
        data = values.astype(f"int{storage.bit_width}")
    else:
        data = values.astype(f"float{storage.bit_width}")
    validity, null_count = _validity(present)
    return pa.Array.from_buffers(storage, len(values), [validity, pa.py_buffer(data)], null_count)


def _text(
    value: tuple[np.ndarray, np.ndarray], present: np.ndarray | None, n: int, storage: pa.DataType
) -> pa.Array:
    """Strings or bytes from their sizes and their bytes one after the other (a null
    row's size 0)."""
    sizes, text_bytes = value
    if present is not None:
        all_sizes = np.zeros(n, np.int64)
        all_sizes[present] = sizes
        sizes = all_sizes
    if len(text_bytes) >= 2**31:
        raise NotProven  # more than a string array's 32-bit offsets hold
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    validity, null_count = _validity(present)
    array = pa.Array.from_buffers(
        storage, n, [validity, pa.py_buffer(offsets), pa.py_buffer(text_bytes)], null_count
    )
    if storage == pa.string():
        try:
            array.validate(full=True)  # UTF-8, as the compiled reader's `.decode()`
        except pa.ArrowInvalid as exc:
            raise NotProven from exc
    return array
