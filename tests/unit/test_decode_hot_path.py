"""The per-record decode path: message chunks as columns, metadata columns built per chunk,
and flat Avro records read by compiled readers (checked against fastavro).

Bytes come from confluent-kafka's real AvroSerializer (mock registry, in process).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import pickle
import random
import uuid
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.ingest.columns import BAD_RECORD_COLUMN, TOMBSTONE_COLUMN
from tableflow_core.kafka.messages import KafkaMessage, MessageChunk
from tableflow_core.pipeline.decode_chunks import ChunkDecoder
from tableflow_core.schemas.avro_records import compile_record_reader
from tableflow_core.schemas.avro_types import map_avro_schema
from tableflow_core.schemas.decoding import DecoderSpec, build_decoder, serialize_schema
from tableflow_core.schemas.formats import METADATA_COLUMNS, FormatSpec
from tableflow_core.schemas.payloads import AvroPayloadDecoder, PayloadError
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import resolve_schema
from tests.unit.test_schemas_avro import avro_bytes, mock_registry, record

UTC = dt.UTC

# Every field kind the compiled reader handles (the rest goes through fastavro).
FLAT = record(
    [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "by", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "e_ref", "type": "E"},
        {"name": "ns", "type": ["null", "string"]},
        {"name": "sn", "type": ["string", "null"]},
        {"name": "ne", "type": ["null", "E"]},
        {"name": "nts", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "lts_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "t_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "t_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "odd", "type": {"type": "long", "logicalType": "made-up"}},
    ],
    "Flat",
)
COLUMNS = tuple(f["name"] for f in FLAT["fields"])
FLAT_MAPPING = map_avro_schema(json.dumps(FLAT))

ints = st.integers(-(2**31), 2**31 - 1)
longs = st.integers(-(2**63), 2**63 - 1)
strings = st.text(max_size=20)
flat_values = st.fixed_dictionaries(
    {
        "b": st.booleans(),
        "i": ints,
        "l": longs,
        "f": st.floats(width=32),
        "d": st.floats(),
        "s": strings,
        "by": st.binary(max_size=20),
        "e": st.sampled_from("ABC"),
        "e_ref": st.sampled_from("ABC"),
        "ns": st.none() | strings,
        "sn": st.none() | strings,
        "ne": st.none() | st.sampled_from("ABC"),
        "nts": st.none() | st.datetimes(timezones=st.just(UTC)),
        "ts_ms": st.datetimes(timezones=st.just(UTC)),
        "ts_us": st.datetimes(timezones=st.just(UTC)),
        "lts_ms": st.datetimes(),
        "t_ms": st.times(),
        "t_us": st.times(),
        "day": st.dates(),
        "u": st.uuids(),
        "odd": longs,
    }
)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


def outcome(read: Any, data: bytes) -> tuple[Any, ...] | str:
    try:
        return tuple(read(data))
    except PayloadError as exc:
        return f"error: {exc.reason}"


def flat_decoder() -> tuple[RegistrySettings, AvroPayloadDecoder]:
    registry = mock_registry()
    return registry, AvroPayloadDecoder(registry.client(), as_columns=True)


def by_fastavro(data: bytes) -> tuple[Any, ...]:
    """What the decoder did before compiled readers: fastavro + the trailing-bytes check."""
    buffer = io.BytesIO(data)
    buffer.seek(5)
    try:
        value = fastavro.schemaless_reader(
            buffer,
            FLAT_MAPPING.reader_schema,
            None,
            return_record_name=True,
            return_record_name_override=True,
        )
    except (EOFError, StopIteration, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise PayloadError(f"fastavro: {exc}") from exc
    if buffer.tell() != len(data):
        raise PayloadError("trailing bytes")
    return tuple(value.get(c) for c in COLUMNS)


def readers(decoder: AvroPayloadDecoder) -> dict[str, Any]:
    """The decoder's two compiled paths (columns for values, dicts for keys) and fastavro."""
    return {
        "tuple_reader": decoder.tuple_reader(COLUMNS),
        "decode": lambda data: tuple(map(decoder.decode(data).get, COLUMNS)),
        "fastavro": by_fastavro,
    }


def test_flat_schema_compiles_and_others_do_not() -> None:
    assert compile_record_reader(map_avro_schema(json.dumps(FLAT)), COLUMNS) is not None
    for field_type in (
        {"type": "array", "items": "long"},
        {"type": "map", "values": "long"},
        {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        {"type": "fixed", "name": "F", "size": 4},
        record([{"name": "x", "type": "long"}], "Inner"),
        ["null", "long", "string"],
    ):
        schema = record([{"name": "a", "type": "long"}, {"name": "x", "type": field_type}])
        assert compile_record_reader(map_avro_schema(json.dumps(schema)), ("a", "x")) is None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=flat_values)
def test_compiled_reader_reads_what_fastavro_reads(value: dict[str, Any]) -> None:
    registry, decoder = flat_decoder()
    data = avro_bytes(registry, "flat", FLAT, value)
    paths = readers(decoder)
    expected = by_fastavro(data)
    for name in ("tuple_reader", "decode"):
        got = paths[name](data)
        assert all(same(a, b) for a, b in zip(got, expected, strict=True)), (name, got, expected)


def test_corrupt_bytes_never_read_as_data_fastavro_would_reject() -> None:
    """Truncated, mangled and padded records: where fastavro fails the compiled reader fails,
    where the compiled reader gives values they are fastavro's."""
    registry, decoder = flat_decoder()
    rng = random.Random(7)
    values = [
        {
            "b": True, "i": -5, "l": 2**40, "f": 1.5, "d": -2.25, "s": "héllo", "by": b"\x00\xff",
            "e": "C", "e_ref": "A", "ns": None, "sn": "x", "ne": "B",
            "nts": dt.datetime(2024, 1, 2, tzinfo=UTC), "ts_ms": dt.datetime(1969, 12, 31, tzinfo=UTC),
            "ts_us": dt.datetime(2030, 1, 1, tzinfo=UTC), "lts_ms": dt.datetime(2024, 5, 6),
            "t_ms": dt.time(1, 2, 3), "t_us": dt.time(23, 59), "day": dt.date(2024, 2, 29),
            "u": uuid.UUID(int=5), "odd": -(2**62),
        },
    ]  # fmt: skip
    paths = readers(decoder)
    compared = stricter = 0
    for value in values:
        data = avro_bytes(registry, "flat", FLAT, value)
        mangled = [data[:k] for k in range(5, len(data))] + [data + b"\x00", data + b"\x02ab"]
        for _ in range(3000):
            k = rng.randrange(5, len(data))
            mangled.append(data[:k] + bytes([rng.randrange(256)]) + data[k + 1 :])
        for bad in mangled:
            want = outcome(paths["fastavro"], bad)
            for name in ("tuple_reader", "decode"):
                got = outcome(paths[name], bad)
                compared += 1
                if isinstance(want, str):
                    assert isinstance(got, str), (name, bad, got, want)
                elif isinstance(got, str):
                    stricter += 1  # e.g. a negative enum index fastavro reads as the last symbol
                else:
                    assert all(same(a, b) for a, b in zip(got, want, strict=True)), (name, bad)
    assert compared > 6000 and stricter < compared // 10


def test_negative_enum_or_union_index_is_a_bad_record_not_another_symbol() -> None:
    registry = mock_registry()
    schema = record(
        [
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
            {"name": "n", "type": ["null", "long"]},
        ]
    )
    good = avro_bytes(registry, "neg", schema, {"e": "B", "n": 3})
    target = resolve_schema("neg", FormatSpec(format="avro"), None, (), registry).arrow_schema
    decoder = build_decoder(
        DecoderSpec("neg", FormatSpec(format="avro"), None, (), registry, serialize_schema(target))
    )
    minus_one = b"\x01"  # zigzag -1
    enum_bad = good[:5] + minus_one + good[6:]
    union_bad = good[:6] + minus_one + good[7:]
    messages = [KafkaMessage("neg", 0, i, None, None, v) for i, v in enumerate((good, enum_bad))]
    messages.append(KafkaMessage("neg", 0, 2, None, None, union_bad))
    result = decoder.decode(messages)
    assert result.batch.to_pylist() == [{"e": "B", "n": 3}]
    assert [(f.offset, "out of range" in f.reason) for f in result.failures] == [
        (1, True),
        (2, True),
    ]
    assert all(f.reason.startswith("corrupt or truncated Avro payload") for f in result.failures)


V1 = record([{"name": "id", "type": "long"}, {"name": "qty", "type": "long"}])


def mixed_chunk(registry: RegistrySettings, topic: str) -> tuple[MessageChunk, dict[int, Any]]:
    """Good rows, tombstone, bad values and keys, odd timestamps and headers, in one chunk."""
    key_schema = record([{"name": "user_id", "type": "long"}], "Key")
    key = avro_bytes(registry, topic, key_schema, {"user_id": 77}, key=True)
    value = avro_bytes(registry, topic, V1, {"id": 1, "qty": 2})
    big = avro_bytes(registry, topic, V1, {"id": 3, "qty": 2**40})  # qty column is int32 below
    at = 1_700_000_000_123
    messages = [
        KafkaMessage(topic, 2, 10, at, key, value, (("h", b"v"), ("h", None))),
        KafkaMessage(topic, 2, 11, None, None, value),  # no timestamp, no key, no headers
        KafkaMessage(topic, 2, 12, -1, key, None),  # tombstone
        KafkaMessage(topic, 2, 13, at, key, b"\x01" + value[1:]),  # wrong magic byte
        KafkaMessage(topic, 2, 14, at, key, value[:1] + b"\x00\x0f\x42\x3f" + value[5:]),
        KafkaMessage(topic, 2, 15, at, key, value[:-1]),  # truncated
        KafkaMessage(topic, 2, 16, -5, b"\x07", value),  # key not Avro: key failure
        KafkaMessage(topic, 2, 17, at + 1, key, big),  # does not fit the table
        KafkaMessage(topic, 2, 18, 0, key, value, (("k", b""),)),
    ]
    ts = dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    expected = {
        10: {"_kafka_timestamp": ts, "_kafka_key": {"user_id": 77},
             "_kafka_headers": [("h", b"v"), ("h", None)]},
        11: {"_kafka_timestamp": None, "_kafka_key": None, "_kafka_headers": None},
        18: {"_kafka_timestamp": dt.datetime(1970, 1, 1, tzinfo=UTC), "_kafka_key": {"user_id": 77},
             "_kafka_headers": [("k", b"")]},
    }  # fmt: skip
    for offset, row in expected.items():
        row.update(
            {"id": 1, "qty": 2, "_kafka_topic": topic, "_kafka_partition": 2}
            | {"_kafka_offset": offset}
        )
    return MessageChunk.of(messages), expected


def metadata_decoder(registry: RegistrySettings, topic: str) -> tuple[Any, pa.Schema]:
    avro = FormatSpec(format="avro")
    target = resolve_schema(topic, avro, avro, METADATA_COLUMNS, registry).arrow_schema
    target = target.set(target.get_field_index("qty"), pa.field("qty", pa.int32()))
    spec = DecoderSpec(topic, avro, avro, METADATA_COLUMNS, registry, serialize_schema(target))
    return build_decoder(spec), target


def test_metadata_columns_per_chunk_match_the_per_record_values() -> None:
    registry = mock_registry()
    chunk, expected = mixed_chunk(registry, "mixed")
    decoder, target = metadata_decoder(registry, "mixed")
    result = decoder.decode(chunk)
    assert result.batch.schema.equals(target)
    assert result.tombstones == 1
    names = target.names
    assert result.batch.to_pylist() == [{n: expected[o][n] for n in names} for o in (10, 11, 18)]
    reasons = {f.offset: f.reason for f in result.failures}
    assert sorted(reasons) == [13, 14, 15, 16, 17]
    assert "magic byte 1" in reasons[13]
    assert "unknown schema id 999999" in reasons[14]
    assert "truncated" in reasons[15]
    assert reasons[16].startswith("key: ")
    assert "does not fit the table schema" in reasons[17]
    assert [(f.topic, f.partition) for f in result.failures] == [("mixed", 2)] * 5
    # a plain list of the same messages decodes the same
    again = decoder.decode(list(chunk))
    assert again.batch.equals(result.batch) and again.failures == result.failures


def test_chunk_decoder_positions_and_bad_records_for_a_mixed_chunk() -> None:
    registry = mock_registry()
    chunk, expected = mixed_chunk(registry, "mixedc")
    decoder, target = metadata_decoder(registry, "mixedc")
    chunks = ChunkDecoder(decoder, target, None, "run")
    out = [r for b in chunks.decode(chunk) for r in b.to_pylist()]
    good = [r for r in out if r[BAD_RECORD_COLUMN] is None and not r[TOMBSTONE_COLUMN]]
    bad = [r[BAD_RECORD_COLUMN] for r in out if r[BAD_RECORD_COLUMN] is not None]
    assert [(r[SOURCE_PARTITION_COLUMN], r[SOURCE_OFFSET_COLUMN]) for r in good] == [
        (2, 10),
        (2, 11),
        (2, 18),
    ]
    # the null value at offset 12 is a tombstone row: counted by the decode stage, all NULL
    (tombstone,) = [r for r in out if r[TOMBSTONE_COLUMN]]
    assert tombstone[SOURCE_OFFSET_COLUMN] == 12 and tombstone[BAD_RECORD_COLUMN] is None
    assert all(tombstone[n] is None for n in target.names)
    assert [{n: r[n] for n in target.names} for r in good] == [
        {n: expected[o][n] for n in target.names} for o in (10, 11, 18)
    ]
    assert [(b["source_topic"], b["source_partition"], b["source_offset"]) for b in bad] == [
        ("mixedc", 2, o) for o in (13, 14, 15, 16, 17)
    ]
    by_offset = {b["source_offset"]: b for b in bad}
    assert by_offset[16]["source_timestamp"] is None  # negative timestamp: none
    assert by_offset[16]["key"] == b"\x07" and by_offset[13]["value"] == chunk.values[3]
    assert by_offset[13]["headers"] is None
    again = [r for b in chunks.decode(list(chunk)) for r in b.to_pylist()]
    for r in (*out, *again):
        if r[BAD_RECORD_COLUMN] is not None:
            r[BAD_RECORD_COLUMN].pop("failed_at")
    assert again == out  # a plain list of the same messages decodes the same


def test_message_chunk_is_a_sequence_of_messages() -> None:
    messages = [
        KafkaMessage("t", 0, 5, 1, b"k", b"v", (("h", b"x"),)),
        KafkaMessage("t", 0, 7, None, None, None),
        KafkaMessage("t", 0, 8, 3, None, b"w"),
    ]
    chunk = MessageChunk.of(messages)
    assert MessageChunk.of(chunk) is chunk
    assert len(chunk) == 3 and list(chunk) == messages and chunk == messages
    assert chunk[1] == messages[1] and chunk[-1] == messages[-1]
    assert list(chunk[1:]) == messages[1:] and list(chunk.select([2, 0])) == [
        messages[2],
        messages[0],
    ]
    assert pickle.loads(pickle.dumps(chunk)) == messages
    raw = MessageChunk(["t"], [1], [2], [None], [None], [b"v"], [[("h", None)]])
    assert raw[0].headers == (("h", None),)  # the client's header lists become tuples
    assert MessageChunk(["t"], [1], [2], [None], [None], [b"v"], [None])[0].headers == ()
    with pytest.raises(IndexError):
        chunk[3]
    with pytest.raises(ValueError, match="one entry per message"):
        MessageChunk(["t"], [1], [2, 3], [None], [None], [b"v"], [None])


def test_fewer_gc_passes_raises_the_threshold_and_restores_it() -> None:
    import gc

    from tableflow_core.pipeline.decode_chunks import fewer_gc_passes

    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_gc_passes(threshold=123_456):
        assert gc.get_threshold() == (123_456, *before[1:])
        assert gc.isenabled()  # cycles (bad records' exceptions) are still collected
        raise RuntimeError
    assert gc.get_threshold() == before
    with fewer_gc_passes(threshold=1):  # never lowered
        assert gc.get_threshold() == before


def test_upsert_keys_read_as_key_columns_match_the_decoded_path() -> None:
    """Flat record keys are read straight into the key columns; primitive keys, keys that
    do not fit and broken keys give the same rows and bad records as the decoded path, in
    whichever order they come."""
    from tableflow_core.ingest.columns import TOMBSTONE_COLUMN
    from tableflow_core.pipeline.decode_chunks import KeySpec

    registry, topic = mock_registry(), "keys"
    table = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])
    value = FormatSpec(
        format="json",
        json_columns=({"name": "name", "type": "string"},),  # type: ignore[arg-type]
    )
    long_key = record([{"name": "id", "type": "long"}], "LongKey")
    text_key = record([{"name": "id", "type": "string"}], "TextKey")
    other_key = record([{"name": "other", "type": "long"}], "OtherKey")

    def key(schema: Any, data: Any) -> bytes:
        return avro_bytes(registry, topic, schema, data, key=True)

    def named(name: str) -> bytes:
        return json.dumps({"name": name}).encode()

    records = [
        (key(long_key, {"id": 1}), named("a")),
        (key(text_key, {"id": "42"}), named("b")),  # text that fits a long column
        (key(text_key, {"id": "x9"}), named("c")),  # bad: does not fit
        (key(long_key, {"id": 1})[:-1], named("d")),  # bad: truncated
        (key(other_key, {"other": 3}), named("e")),  # bad: no id
        (key(long_key, {"id": 5}), None),  # tombstone
        (None, named("f")),  # bad: no key
        (key("long", 7), named("g")),  # a primitive key fills the key column
        (key(long_key, {"id": 8}), named("h")),
    ]

    def decoded(order: list[int]) -> dict[int, tuple[Any, ...]]:
        decoder = build_decoder(DecoderSpec(topic, value, None, (), None, serialize_schema(table)))
        chunks = ChunkDecoder(
            decoder, table, KeySpec(FormatSpec(format="avro"), ("id",), registry), "r"
        )
        batch = [KafkaMessage(topic, 0, i, 0, *records[i], ()) for i in order]
        out = pa.Table.from_batches(list(chunks.decode(batch))).to_pylist()
        return {
            r[SOURCE_OFFSET_COLUMN]: (
                r["id"],
                r["name"],
                r[TOMBSTONE_COLUMN],
                r[BAD_RECORD_COLUMN] and r[BAD_RECORD_COLUMN]["error_message"].split(":")[1],
            )
            for r in out
        }

    expected = {
        0: (1, "a", False, None),
        1: (42, "b", False, None),
        2: (None, None, False, " key value 'x9' does not fit key column 'id' (int64)"),
        3: (None, None, False, " corrupt or truncated Avro payload"),
        4: (None, None, False, " key has no value for key column(s) ['id']"),
        5: (5, None, True, None),
        6: (None, None, False, " an upsert record needs a key; this one has none"),
        7: (7, "g", False, None),
        8: (8, "h", False, None),
    }
    forward = list(range(len(records)))
    assert decoded(forward) == expected
    assert decoded([7, *forward[:7], 8]) == expected  # the primitive key first


@pytest.mark.parametrize("column_type", [pa.int64(), pa.int32()])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.tuples(
            st.one_of(st.integers(-(2**40), 2**40), st.integers(-5, 5)),  # the key's id
            st.sampled_from(["row", "tombstone", "mismatch", "no key"]),
        ),
        max_size=30,
    )
)
def test_a_chunk_s_keys_read_column_by_column_equal_the_row_by_row_path(
    column_type: pa.DataType, rows: list[tuple[int, str]]
) -> None:
    """A chunk of flat Avro keys is read straight into key columns (`_key_columns`); any
    key that needs a row's own check (none at all, a value out of an int column's range)
    sends the chunk through the row by row path. Both give the same rows, tombstones and
    bad records, whatever the chunk holds."""
    from tableflow_core.pipeline.decode_chunks import KeySpec

    registry, topic = mock_registry(), "keycols"
    table = pa.schema([pa.field("id", column_type), pa.field("name", pa.string())])
    value = FormatSpec(
        format="json",
        json_columns=(  # type: ignore[arg-type]
            {"name": "id", "type": "long"},
            {"name": "name", "type": "string"},
        ),
    )
    long_key = record([{"name": "id", "type": "long"}], "LongKey")
    messages = []
    for offset, (key_id, kind) in enumerate(rows):
        key = None if kind == "no key" else avro_bytes(registry, topic, long_key, {"id": key_id})
        named = {"name": f"n{offset}"} | ({"id": key_id + 1} if kind == "mismatch" else {})
        payload = None if kind == "tombstone" else json.dumps(named).encode()
        messages.append(KafkaMessage(topic, 0, offset, 0, key, payload, ()))

    def decoded(columns: bool) -> list[dict[str, Any]]:
        decoder = build_decoder(DecoderSpec(topic, value, None, (), None, serialize_schema(table)))
        chunks = ChunkDecoder(
            decoder, table, KeySpec(FormatSpec(format="avro"), ("id",), registry), "r"
        )
        chunks._fast_keys = columns
        out = pa.Table.from_batches(list(chunks.decode(messages)), schema=chunks.output_schema)
        bad = out[BAD_RECORD_COLUMN].to_pylist()
        for r, b in zip(rows := out.to_pylist(), bad, strict=True):
            r[BAD_RECORD_COLUMN] = b and {k: b[k] for k in ("error_class", "error_message")}
        return sorted(rows, key=lambda r: r[SOURCE_OFFSET_COLUMN])

    by_columns, by_rows = decoded(True), decoded(False)
    assert by_columns == by_rows
    if all(kind != "no key" for _, kind in rows) and column_type == pa.int64():
        # No key needs a row's own check: nothing but mismatches is a bad record.
        assert {r[BAD_RECORD_COLUMN]["error_class"] for r in by_rows if r[BAD_RECORD_COLUMN]} <= {
            "KeyMismatchError"
        }
