"""The plain-JSON values reader (no row dict) gives exactly what the row reader gives, and
fails exactly where it fails (process-free)."""

from __future__ import annotations

import json

import pytest

from tableflow_core.schemas.formats import FormatSpec, JsonColumn
from tableflow_core.schemas.payloads import PayloadError, payload_decoder
from tableflow_core.schemas.plain_json import plain_json_reader, plain_json_values_reader

COLUMNS = (
    JsonColumn(name="id", type="long"),
    JsonColumn(name="name"),
    JsonColumn(name="price", type="decimal(10,2)"),
    JsonColumn(name="ok", type="boolean"),
    JsonColumn(name="at", type="timestamptz"),
    JsonColumn(name="city", path="address.city"),
    JsonColumn(name="extra", type="json"),
    JsonColumn(name="blob", type="binary"),
    JsonColumn(name="ratio", type="double", path="stats.ratio"),
)
WANTED = ("blob", "id", "missing", "name", "price", "ok", "at", "city", "extra", "ratio")

DOCUMENTS = [
    {"id": 1, "name": "a", "price": "1.50", "ok": True, "at": "2026-11-26T10:00:00Z"},
    {"id": 2, "name": 7, "price": 2.5, "address": {"city": "Oslo"}, "extra": {"k": [1, 2]}},
    {"name": {"nested": True}, "address": "not an object", "extra": None, "blob": "AAEC"},
    {"name": [1, "x"], "price": None, "stats": {"ratio": 0.25}, "extra": "text", "id": "3"},
    {"name": False, "address": {"city": 12}, "ok": "yes", "unexpected": 1},
    {},
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_values_are_the_rows_values(document: dict[str, object]) -> None:
    data = json.dumps(document).encode()
    row = plain_json_reader(COLUMNS)(data)
    expected = tuple(row.get(name) for name in WANTED)
    assert plain_json_values_reader(COLUMNS, WANTED)(data) == expected


@pytest.mark.parametrize(
    "data", [b"[1, 2]", b"3", b"null", b'"text"', b"{not json", b"\xff\xfe", b'{"blob": "%%"}']
)
def test_what_the_row_reader_refuses_the_values_reader_refuses(data: bytes) -> None:
    with pytest.raises(ValueError) as by_row:
        plain_json_reader(COLUMNS)(data)
    with pytest.raises(ValueError) as by_values:
        plain_json_values_reader(COLUMNS, WANTED)(data)
    assert str(by_values.value) == str(by_row.value)


def test_the_decoder_names_bad_json_the_same_either_way() -> None:
    decoder = payload_decoder(FormatSpec(format="json", json_columns=COLUMNS), None, True)
    read = decoder.tuple_reader(WANTED)
    for data in (b"[1]", b"{oops"):
        with pytest.raises(PayloadError) as by_values:
            read(data)
        with pytest.raises(PayloadError) as by_row:
            decoder.decode(data)
        assert by_values.value.reason == by_row.value.reason
