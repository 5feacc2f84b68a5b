"""Plain JSON (declared columns or one `value` column), string and bytes values and keys."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from pydantic import ValidationError

from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.schemas.formats import FormatSpec, JsonColumn
from tests.decoders import resolved_decoder

UTC = dt.UTC


def run(
    value: FormatSpec,
    key: FormatSpec | None,
    metadata: tuple[str, ...],
    payloads: list[tuple[bytes | None, bytes | None]],
):  # type: ignore[no-untyped-def]
    decoder, target = resolved_decoder("t", value, key, metadata)
    messages = [KafkaMessage("t", 0, i, 1000, k, v) for i, (k, v) in enumerate(payloads)]
    return target, decoder.decode(messages)


def test_plain_json_without_columns_is_one_value_column() -> None:
    schema, result = run(
        FormatSpec(format="json"),
        FormatSpec(format="string"),
        ("key",),
        [(b"k1", b'{"a": 1}'), (b"k2", b"not json")],
    )
    assert schema == pa.schema([("value", pa.string()), ("_kafka_key", pa.string())])
    assert result.batch.to_pylist() == [{"value": '{"a": 1}', "_kafka_key": "k1"}]
    assert result.failures[0].offset == 1 and "invalid JSON" in result.failures[0].reason


def test_plain_json_declared_columns() -> None:
    columns = (
        JsonColumn(name="id", type="long"),
        JsonColumn(name="city", path="address.city"),
        JsonColumn(name="at", type="timestamptz"),
        JsonColumn(name="day", type="date"),
        JsonColumn(name="amount", type="decimal(10,2)"),
        JsonColumn(name="raw", type="json", path="address"),
    )
    schema, result = run(
        FormatSpec(format="json", json_columns=columns),
        None,
        ("timestamp",),
        [
            (
                None,
                b'{"id": 1, "address": {"city": "Rome", "n": 3}, "at": "2024-01-01T10:00:00+01:00", "day": "2024-01-02", "amount": 3.5}',
            ),
            (None, b'{"id": 2}'),
        ],
    )
    assert schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert result.batch.to_pylist() == [
        {
            "id": 1,
            "city": "Rome",
            "at": dt.datetime(2024, 1, 1, 9, tzinfo=UTC),
            "day": dt.date(2024, 1, 2),
            "amount": Decimal("3.50"),
            "raw": '{"city":"Rome","n":3}',
            "_kafka_timestamp": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
        },
        {
            "id": 2,
            "city": None,
            "at": None,
            "day": None,
            "amount": None,
            "raw": None,
            "_kafka_timestamp": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
        },
    ]


def test_plain_json_declared_columns_refuse_a_value_that_is_not_an_object() -> None:
    """An array, a number or a string has no columns: a bad record, never a row of nulls."""
    _, result = run(
        FormatSpec(format="json", json_columns=(JsonColumn(name="id", type="long"),)),
        None,
        (),
        [(None, b"[1, 2]"), (None, b"7"), (None, b'"x"'), (None, b"null"), (None, b'{"id": 4}')],
    )
    assert result.batch.to_pylist() == [{"id": 4}]
    assert [f.offset for f in result.failures] == [0, 1, 2, 3]
    assert "JSON value is an array, not an object" in result.failures[0].reason
    assert "JSON value is null, not an object" in result.failures[3].reason


def test_duplicate_json_columns_are_rejected() -> None:
    with pytest.raises(ValidationError, match="more than once"):
        FormatSpec(format="json", json_columns=(JsonColumn(name="a"), JsonColumn(name="a")))


def test_string_and_bytes_values_and_raw_key() -> None:
    schema, result = run(
        FormatSpec(format="string"), None, ("key", "partition"), [(b"\xff", b"hi"), (None, b"\xff")]
    )
    assert schema.field("_kafka_key").type == pa.binary()
    assert result.batch.to_pylist() == [
        {"value": "hi", "_kafka_key": b"\xff", "_kafka_partition": 0}
    ]
    assert "not UTF-8" in result.failures[0].reason
    schema, result = run(FormatSpec(format="bytes"), None, (), [(None, b"\x00\xff"), (None, None)])
    assert result.batch.to_pylist() == [{"value": b"\x00\xff"}] and result.tombstones == 1
