"""schemas/avro_columns.py against the compiled reader (`avro_records`), record by record:
for any payloads, the columns read at once are the compiled reader's values as Arrow
arrays of the storage types, or None, and None only where the record-by-record path
refuses a record or a value."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tableflow_core.schemas.arrow_values import TemporalAs, storage_type
from tableflow_core.schemas.avro_columns import compile_columns_reader
from tableflow_core.schemas.avro_records import compile_record_reader
from tableflow_core.schemas.avro_types import AvroMapping, map_avro_schema
from tests.avro_records import EVENT_FIELDS, avro_record, nullable

FRAME = b"\x00\x00\x00\x00\x07"
KIND = EVENT_FIELDS["kind"]
# The benchmarks' event, and a field of each other kind read at once.
SCHEMA = avro_record(
    "Event",
    **EVENT_FIELDS,
    blob="bytes",
    seen=["long", "null"],
    nanos={"type": "long", "logicalType": "timestamp-nanos"},
    label=nullable(KIND | {"name": "Label"}),
)
MAPPING = map_avro_schema(json.dumps(SCHEMA))
COLUMNS = tuple(f.name for f in MAPPING.arrow_type)
TYPES = tuple(storage_type(f.type, TemporalAs.INT) for f in MAPPING.arrow_type)
PARSED = fastavro.parse_schema(SCHEMA)


def payload(record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, PARSED, record)
    return FRAME + out.getvalue()


def one_by_one(
    mapping: AvroMapping,
    columns: tuple[str, ...],
    types: tuple[pa.DataType, ...],
    payloads: list[bytes],
) -> list[pa.Array] | None:
    """The compiled reader's values of each record as Arrow arrays of `types`; None when
    it refuses a record, or Arrow a value (the chunk's bad records, named one by one)."""
    reader = compile_record_reader(mapping, columns)
    assert reader is not None
    rows = []
    for data in payloads:
        if not data.startswith(FRAME):
            return None
        try:
            rows.append(reader(data, len(FRAME)))
        except Exception:
            return None
    try:
        return [pa.array([r[j] for r in rows], t) for j, t in enumerate(types)]
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None


def same(found: list[pa.Array] | None, expected: list[pa.Array] | None) -> bool:
    if found is None or expected is None:
        return found is expected
    return all(
        a.type == b.type and repr(a.to_pylist()) == repr(b.to_pylist())  # NaN == NaN
        for a, b in zip(found, expected, strict=True)
    )


texts = st.text(max_size=12)
records = st.fixed_dictionaries(
    {
        "id": st.integers(-(2**63), 2**63 - 1),
        "user": texts,
        "amount": st.floats(allow_nan=False),
        "qty": st.integers(-(2**31), 2**31 - 1),
        "active": st.booleans(),
        "at": st.integers(-(2**53), 2**53),
        "city": st.none() | texts,
        "score": st.floats(width=32, allow_nan=False),
        "kind": st.sampled_from(["A", "B", "C"]),
        "day": st.integers(-(2**31), 2**31 - 1),
        "blob": st.binary(max_size=8),
        "seen": st.none() | st.integers(-(2**63), 2**63 - 1),
        "nanos": st.integers(-(2**63), 2**63 - 1),
        "label": st.none() | st.sampled_from(["A", "B", "C"]),
    }
)


def read_at_once(payloads: list[bytes]) -> list[pa.Array] | None:
    reader = compile_columns_reader(MAPPING, COLUMNS, TYPES)
    assert reader is not None
    return reader(payloads, FRAME)


@settings(max_examples=150, deadline=None)
@given(st.lists(records, min_size=1, max_size=40))
def test_valid_records_read_at_once_as_one_by_one(rows: list[dict[str, Any]]) -> None:
    payloads = [payload(r) for r in rows]
    expected = one_by_one(MAPPING, COLUMNS, TYPES, payloads)
    found = read_at_once(payloads)
    # The timestamps in ms beyond int64 once in us are refused either way (Arrow's range).
    assert same(found, expected)
    if expected is not None:
        assert found is not None


def _corrupt(data: bytes, how: int, at: int, extra: bytes) -> bytes:
    at = len(FRAME) + at % max(1, len(data) - len(FRAME))
    if how == 0:
        return data[:at]  # truncated
    if how == 1:
        return data + extra  # trailing bytes
    if how == 2:
        return data[:at] + extra + data[at + len(extra) :]  # overwritten
    if how == 3:
        return data[:at] + extra + data[at:]  # inserted
    return b"\x00\x00\x00\x00\x08" + data[len(FRAME) :]  # another schema id


@settings(max_examples=400, deadline=None)
@given(
    st.lists(records, min_size=1, max_size=6),
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 200), st.binary(min_size=1, max_size=11)),
        min_size=1, max_size=3,
    ),
    st.integers(0, 5),
)  # fmt: skip
def test_whatever_the_bytes_a_result_is_the_one_by_one_result(
    rows: list[dict[str, Any]], damage: list[tuple[int, int, bytes]], which: int
) -> None:
    payloads = [payload(r) for r in rows]
    for how, at, extra in damage:
        i = which % len(payloads)
        payloads[i] = _corrupt(payloads[i], how, at, extra)
    found = read_at_once(payloads)
    assert found is None or same(found, one_by_one(MAPPING, COLUMNS, TYPES, payloads))


def test_the_reader_is_used_for_the_event_and_names_no_missing_column() -> None:
    rows = [
        {"id": 1, "user": "é", "amount": 1.5, "qty": 2, "active": True, "at": 3, "city": None,
         "score": 0.5, "kind": "B", "day": 4, "blob": b"\x00", "seen": None, "nanos": 1999,
         "label": "C"},
    ]  # fmt: skip
    found = read_at_once([payload(r) for r in rows])
    assert found is not None
    values = {c: a.to_pylist()[0] for c, a in zip(COLUMNS, found, strict=True)}
    assert values["at"] == 3000 and values["nanos"] == 1 and values["kind"] == "B"
    assert values["user"] == "é" and values["city"] is None and values["label"] == "C"
    reader = compile_columns_reader(MAPPING, ("id", "absent"), (pa.int64(), pa.string()))
    assert reader is not None
    ids, absent = reader([payload(r) for r in rows], FRAME) or []
    assert ids.to_pylist() == [1] and absent.to_pylist() == [None]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"\xed\xa0\x80", "an encoded surrogate"),
        (b"\xc0\x80", "an overlong NUL"),
        (b"\xf4\x90\x80\x80", "beyond U+10FFFF"),
        (b"\xe2\x82", "a cut sequence"),
    ],
)
def test_text_python_refuses_is_refused(text: bytes, why: str) -> None:
    schema = avro_record("T", s="string")
    mapping = map_avro_schema(json.dumps(schema))
    reader = compile_columns_reader(mapping, ("s",), (pa.string(),))
    assert reader is not None
    data = FRAME + bytes([len(text) * 2]) + text
    assert reader([data], FRAME) is None, why


@pytest.mark.parametrize(
    ("column", "storage"),
    [("amount", pa.float32()), ("id", pa.string()), ("user", pa.binary()), ("blob", pa.string())],
)
def test_a_column_whose_values_arrow_converts_gets_no_reader(
    column: str, storage: pa.DataType
) -> None:
    assert compile_columns_reader(MAPPING, (column,), (storage,)) is None


def test_nested_or_general_unions_get_no_reader() -> None:
    nested = avro_record("N", inner=avro_record("I", x="long"))
    union = avro_record("U", u=["null", "long", "string"])
    for schema in (nested, union):
        mapping = map_avro_schema(json.dumps(schema))
        assert compile_columns_reader(mapping, (), ()) is None


@pytest.mark.parametrize(
    ("varint", "value"),
    [
        (b"\xfe" + b"\xff" * 8 + b"\x01", 2**63 - 1),  # the longest long: 10 bytes
        (b"\xff" * 9 + b"\x01", -(2**63)),
        (b"\x80" * 9 + b"\x00", 0),  # not the shortest form, still a varint
        (b"\x80" * 9 + b"\x02", None),  # bit 64: beyond a long, refused by Arrow
        (b"\x80" * 10 + b"\x00", None),  # 11 bytes: the compiled reader refuses it
    ],
)
def test_a_long_at_the_edges_of_64_bits(varint: bytes, value: int | None) -> None:
    mapping = map_avro_schema(json.dumps(avro_record("L", n="long")))
    reader = compile_columns_reader(mapping, ("n",), (pa.int64(),))
    assert reader is not None
    found = reader([FRAME + varint], FRAME)
    assert same(found, one_by_one(mapping, ("n",), (pa.int64(),), [FRAME + varint]))
    assert (
        (found is None)
        if value is None
        else (found is not None and found[0].to_pylist() == [value])
    )


def test_a_size_near_the_int64_limit_is_refused_not_wrapped() -> None:
    mapping = map_avro_schema(json.dumps(avro_record("S", s="string")))
    reader = compile_columns_reader(mapping, ("s",), (pa.string(),))
    assert reader is not None
    huge = b"\xfc" + b"\xff" * 8 + b"\x01"  # zigzag of 2**63 - 2: at + size would wrap
    assert reader([FRAME + huge + b"x"], FRAME) is None
