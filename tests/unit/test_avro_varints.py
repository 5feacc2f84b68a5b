"""Keys that are each one zigzag varint, decoded at once (schemas/avro_varints.py), against
fastavro's encoding and the compiled record reader one key at a time: valid keys give the
same values; any payload the compiled reader would not read as exactly one varint (short,
long, trailing bytes, another frame, over 64 bits, an int over 32) gives None, so the keys
go key by key and a bad one is named."""

from __future__ import annotations

import io
import json

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tableflow_core.schemas.avro_records import compile_record_reader
from tableflow_core.schemas.avro_types import map_avro_schema
from tableflow_core.schemas.avro_varints import zigzag_varints

FRAME = b"\x00\x00\x00\x00\x07"


def schema(kind: str) -> dict[str, object]:
    return {"type": "record", "name": "Key", "fields": [{"name": "id", "type": kind}]}


def encoded(kind: str, value: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema(kind)), {"id": value})
    return FRAME + out.getvalue()


def one_by_one(kind: str, payloads: list[bytes]) -> list[int] | None:
    """The compiled reader's values, or None when it refuses one of the payloads."""
    reader = compile_record_reader(map_avro_schema(json.dumps(schema(kind))), ("id",))
    assert reader is not None
    values = []
    for payload in payloads:
        if not payload.startswith(FRAME):
            return None
        try:
            (value,) = reader(payload, len(FRAME))
        except Exception:
            return None
        values.append(value)
    return values


longs = st.integers(-(2**63), 2**63 - 1)
ints = st.integers(-(2**31), 2**31 - 1)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["long", "int"]).flatmap(
    lambda kind: st.tuples(st.just(kind), st.lists(longs if kind == "long" else ints, min_size=1))
))  # fmt: skip
def test_valid_keys_decode_to_their_values(case: tuple[str, list[int]]) -> None:
    kind, values = case
    payloads = [encoded(kind, v) for v in values]
    got = zigzag_varints(payloads, FRAME, kind)
    assert got is not None and got.tolist() == values == one_by_one(kind, payloads)


def _corrupt(payload: bytes, how: int, extra: bytes) -> bytes:
    if how == 0:
        return payload[:-1]  # truncated
    if how == 1:
        return payload + extra[:1]  # a trailing byte
    if how == 2:
        return b"\x00\x00\x00\x00\x08" + payload[5:]  # another schema id
    if how == 3:
        return payload[:5] + extra  # any bytes
    return payload


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(["long", "int"]),
    values=st.lists(longs, min_size=1, max_size=8),
    damage=st.lists(st.tuples(st.integers(0, 4), st.binary(min_size=1, max_size=12)), max_size=8),
)
def test_whatever_the_payloads_a_result_is_what_the_reader_says(
    kind: str, values: list[int], damage: list[tuple[int, bytes]]
) -> None:
    """Never a value the compiled reader would not give: None, or the same values."""
    payloads = [encoded("long", v) for v in values]
    for i, (how, extra) in enumerate(damage[: len(payloads)]):
        payloads[i] = _corrupt(payloads[i], how, extra)
    got = zigzag_varints(payloads, FRAME, kind)
    expected = one_by_one(kind, payloads)
    if got is not None:
        assert got.tolist() == expected
    elif expected is not None and kind == "long":
        # only payloads the reader takes but that are no canonical varint may be refused
        assert any(len(p) - len(FRAME) > 10 for p in payloads) or any(
            p[-1] & 0x80 for p in payloads
        )


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (FRAME + b"\xff" * 10 + b"\x01", "11 bytes"),
        (FRAME + b"\xff" * 9 + b"\x02", "over 64 bits"),
        (FRAME + b"\x80", "continued past the end"),
        (FRAME + b"\x02\x02", "two varints"),
        (FRAME, "no value"),
    ],
)
def test_payloads_that_are_not_one_varint_are_refused(payload: bytes, why: str) -> None:
    assert zigzag_varints([encoded("long", 1), payload], FRAME, "long") is None, why


def test_an_int_over_32_bits_is_refused() -> None:
    assert zigzag_varints([encoded("long", 2**31)], FRAME, "int") is None
    assert zigzag_varints([encoded("long", 2**31 - 1)], FRAME, "int") is not None
