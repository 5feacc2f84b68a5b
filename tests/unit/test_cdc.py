"""Debezium change streams (`value.envelope: debezium`, docs/cdc.md), without processes.

Events are Debezium 3.x PostgreSQL envelopes (tests/cdc_events.py) serialized by
confluent-kafka's real AvroSerializer / JSONSerializer / ProtobufSerializer against an
in-process mock registry; they go through the read tasks' decoder (ChunkDecoder) and the
driver's merge (pipeline/upsert_rows.py) into a pyiceberg table, compared with an
independent model that applies the changes in source order.
"""

from __future__ import annotations

import datetime
import json
import random
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.engine.run_branch import publish_run
from tableflow_core.ingest.columns import BAD_RECORD_COLUMN, TOMBSTONE_COLUMN, is_hidden
from tableflow_core.ingest.upsert_order import order_columns
from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.pipeline.decode_chunks import ChunkDecoder, KeySpec
from tableflow_core.pipeline.shared_tasks import UPSERT_SOURCE_COLUMNS
from tableflow_core.pipeline.upsert_rows import DeletesTable, later, merge_batch
from tableflow_core.plan.shape import POSITION_COLUMNS
from tableflow_core.schemas import debezium
from tableflow_core.schemas.decoding import DecoderSpec, build_decoder, serialize_schema
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import SchemaResolutionError, resolve_schema
from tests.cdc_events import (
    KEY_SCHEMA,
    TOPIC,
    Change,
    avro_envelope_schema,
    envelope,
    row,
    to_partitions,
    workload,
)
from tests.unit.test_schemas_avro import avro_bytes, mock_registry

AVRO = FormatSpec(format="avro", envelope="debezium")
KEY = FormatSpec(format="avro")
MIRROR_METADATA = ("cdc_op", "cdc_source_ts", "cdc_lsn", "cdc_tx_id", "cdc_last_commit_lsn")


def register_and_encode(
    registry: RegistrySettings, changes: Sequence[Change], schema: dict[str, Any] | None = None
) -> list[tuple[bytes, bytes | None]]:
    """(key bytes, value bytes) of each change; a Kafka tombstone for op `tombstone`."""
    schema = schema or avro_envelope_schema()
    out = []
    for change in changes:
        key = avro_bytes(registry, TOPIC, KEY_SCHEMA, {"id": change.key}, key=True)
        value = (
            None
            if change.op == "tombstone"
            else avro_bytes(registry, TOPIC, schema, envelope(change))
        )
        out.append((key, value))
    return out


def target(registry: RegistrySettings, metadata: tuple[str, ...] = MIRROR_METADATA) -> pa.Schema:
    return resolve_schema(TOPIC, AVRO, KEY, metadata, registry).arrow_schema


def chunk_decoder(registry: RegistrySettings, schema: pa.Schema, mirror: bool) -> ChunkDecoder:
    spec = DecoderSpec(TOPIC, AVRO, KEY, (), registry, serialize_schema(schema))
    key = KeySpec(KEY, ("id",), registry) if mirror else None
    return ChunkDecoder(build_decoder(spec), schema, key, "run")


def decode(decoder: ChunkDecoder, messages: list[KafkaMessage]) -> pa.Table:
    return pa.Table.from_batches(list(decoder.decode(messages)), decoder.output_schema)


def test_the_envelope_resolves_to_the_after_columns_and_its_metadata() -> None:
    registry = mock_registry()
    register_and_encode(registry, [Change("c", 1, None, row(1, "a"), 10, 5, 700)])
    schema = target(registry)
    assert schema.names == [
        "id", "name", "balance", "updated_at",
        "_cdc_op", "_cdc_source_ts", "_cdc_lsn", "_cdc_tx_id", "_cdc_last_commit_lsn",
    ]  # fmt: skip
    assert schema.field("balance").type == pa.decimal128(10, 2)
    assert schema.field("updated_at").type == pa.timestamp("us")
    assert schema.field("_cdc_source_ts").type == pa.timestamp("us", tz="UTC")
    assert schema.field("_cdc_lsn").type == pa.int64()


def test_a_value_that_is_not_an_envelope_and_cdc_columns_without_one_are_refused() -> None:
    registry = mock_registry()
    plain = {"type": "record", "name": "Row", "fields": [{"name": "id", "type": "int"}]}
    avro_bytes(registry, TOPIC, plain, {"id": 1})
    with pytest.raises(SchemaResolutionError, match="not a Debezium change event envelope"):
        resolve_schema(TOPIC, AVRO, KEY, (), registry)
    with pytest.raises(SchemaResolutionError, match=r"need `value: .*envelope: debezium"):
        resolve_schema(TOPIC, FormatSpec(format="avro"), KEY, ("cdc_op",), registry)


def events_of_every_kind() -> list[Change]:
    return [
        Change("r", 1, None, row(1, "snap", "10.50", 1_700_000_000_000_000), 100, None, 700, snapshot="first"),
        Change("c", 2, None, row(2, "new", "0.01"), 210, 150, 701),
        Change("u", 1, row(1, "snap", "10.50"), row(1, "upd", "11.00"), 220, 150, 701),
        Change("d", 2, row(2, None), None, 230, 215, 702),
        Change("tombstone", 2, None, None, 0, None, 0),
        Change("t", 3, None, None, 240, 235, 703),
        Change("x", 4, None, row(4, "?"), 250, 245, 704),
    ]  # fmt: skip


def messages_of(
    encoded: list[tuple[bytes, bytes | None]], partition: int = 0, first: int = 0
) -> list[KafkaMessage]:
    return [
        KafkaMessage(TOPIC, partition, first + i, 1_767_225_600_000 + i, k, v)
        for i, (k, v) in enumerate(encoded)
    ]


def test_the_mirror_decodes_rows_deletes_and_routes_truncates_and_unknown_ops() -> None:
    registry = mock_registry()
    messages = messages_of(register_and_encode(registry, events_of_every_kind()))
    out = decode(chunk_decoder(registry, target(registry), mirror=True), messages)
    bad = out.filter(out.column(BAD_RECORD_COLUMN).is_valid())
    good = out.filter(out.column(BAD_RECORD_COLUMN).is_null())
    rows = {r["__tf_offset"]: r for r in good.to_pylist()}
    assert sorted(rows) == [0, 1, 2, 3, 4]
    snap, created, updated, deleted, tombstone = (rows[i] for i in range(5))
    assert (snap["name"], str(snap["balance"]), snap["_cdc_op"]) == ("snap", "10.50", "r")
    # io.debezium.time.MicroTimestamp (a PostgreSQL `timestamp`): a wall-clock timestamp
    assert snap["updated_at"] == datetime.datetime(2023, 11, 14, 22, 13, 20)
    assert (snap["_cdc_lsn"], snap["_cdc_last_commit_lsn"], snap["_cdc_tx_id"]) == (100, None, 700)
    assert snap["_cdc_source_ts"].timestamp() == 1_767_225_600
    assert not created[TOMBSTONE_COLUMN] and created["name"] == "new"
    assert updated["name"] == "upd" and updated["_cdc_last_commit_lsn"] == 150
    # A delete is the key's delete at the event's source position.
    assert deleted[TOMBSTONE_COLUMN] and deleted["id"] == 2 and deleted["_cdc_op"] == "d"
    assert (deleted["_cdc_lsn"], deleted["_cdc_last_commit_lsn"]) == (230, 215)
    # The tombstone after it has its key and no source position.
    assert tombstone[TOMBSTONE_COLUMN] and tombstone["id"] == 2 and tombstone["_cdc_lsn"] is None
    reasons = {
        r["source_offset"]: r["error_message"] for r in bad.column(BAD_RECORD_COLUMN).to_pylist()
    }
    assert sorted(reasons) == [5, 6]
    assert "truncate event (op 't') of table public.customers" in reasons[5]
    assert "unknown Debezium operation 'x'" in reasons[6]


def test_the_changelog_keeps_each_change_as_a_row() -> None:
    registry = mock_registry()
    messages = messages_of(register_and_encode(registry, events_of_every_kind()))
    out = decode(chunk_decoder(registry, target(registry), mirror=False), messages)
    good = out.filter(
        pc.and_(out.column(BAD_RECORD_COLUMN).is_null(), pc.invert(out.column(TOMBSTONE_COLUMN)))
    )
    changes = [(r["id"], r["name"], r["_cdc_op"], r["_cdc_lsn"]) for r in good.to_pylist()]
    # The delete keeps its before image (the primary key under REPLICA IDENTITY DEFAULT).
    assert changes == [
        (1, "snap", "r", 100),
        (2, "new", "c", 210),
        (1, "upd", "u", 220),
        (2, None, "d", 230),
    ]
    assert out.filter(out.column(BAD_RECORD_COLUMN).is_valid()).num_rows == 2


def json_schema_envelope() -> dict[str, Any]:
    """Debezium's envelope as Confluent's JsonSchemaConverter writes it (abridged source)."""
    value = {
        "type": "object",
        "title": f"{TOPIC}.Value",
        "properties": {
            "id": {"type": "integer", "connect.index": 0, "connect.type": "int32"},
            "name": {"connect.index": 1, "oneOf": [{"type": "null"}, {"type": "string"}]},
        },
        "required": ["id"],
    }
    nullable_value = {"oneOf": [{"type": "null"}, value]}
    return {
        "type": "object",
        "title": f"{TOPIC}.Envelope",
        "properties": {
            "before": {**nullable_value, "connect.index": 0},
            "after": {**nullable_value, "connect.index": 1},
            "source": {
                "type": "object",
                "title": "io.debezium.connector.postgresql.Source",
                "properties": {
                    "version": {"type": "string"},
                    "ts_ms": {"type": "integer", "connect.type": "int64"},
                    "sequence": {"oneOf": [{"type": "null"}, {"type": "string"}]},
                    "schema": {"type": "string"},
                    "table": {"type": "string"},
                    "txId": {
                        "oneOf": [{"type": "null"}, {"type": "integer", "connect.type": "int64"}]
                    },
                    "lsn": {
                        "oneOf": [{"type": "null"}, {"type": "integer", "connect.type": "int64"}]
                    },
                },
            },
            "op": {"type": "string", "connect.index": 3},
            "ts_ms": {"oneOf": [{"type": "null"}, {"type": "integer", "connect.type": "int64"}]},
        },
        "required": ["source", "op"],
    }


def test_a_json_schema_envelope_through_the_registry() -> None:
    registry = mock_registry()
    serializer = JSONSerializer(json.dumps(json_schema_envelope()), registry.client())
    context = SerializationContext(TOPIC, MessageField.VALUE)
    changes = [
        Change("c", 7, None, {"id": 7, "name": "x"}, 300, 290, 800),
        Change("d", 7, {"id": 7, "name": None}, None, 310, 305, 801),
    ]
    values = []
    for change in changes:
        event = envelope(change)
        event["source"] = {
            k: event["source"][k]
            for k in ("version", "ts_ms", "sequence", "schema", "table", "txId", "lsn")
        }
        del event["transaction"], event["ts_us"], event["ts_ns"]
        values.append(serializer(event, context))
    fmt = FormatSpec(format="json_schema", envelope="debezium")
    schema = resolve_schema(TOPIC, fmt, None, ("cdc_op", "cdc_lsn"), registry).arrow_schema
    assert schema.names == ["id", "name", "_cdc_op", "_cdc_lsn"]
    spec = DecoderSpec(TOPIC, fmt, None, (), registry, serialize_schema(schema))
    decoder = ChunkDecoder(build_decoder(spec), schema, None, "run")
    out = decode(decoder, [KafkaMessage(TOPIC, 0, i, 1, None, v) for i, v in enumerate(values)])
    assert [(r["id"], r["name"], r["_cdc_op"], r["_cdc_lsn"]) for r in out.to_pylist()] == [
        (7, "x", "c", 300),
        (7, None, "d", 310),
    ]


def test_a_protobuf_envelope_through_the_registry() -> None:
    from google.protobuf import descriptor_pb2, message_factory
    from google.protobuf.descriptor_pool import DescriptorPool

    from tests.unit.test_schemas_protobuf import F, _field, proto_bytes

    # As Confluent's ProtobufConverter generates it from Debezium's Connect schema.
    file = descriptor_pb2.FileDescriptorProto(
        name="pg/customers.proto", package="pg.public.customers", syntax="proto3"
    )
    value = file.message_type.add(name="Value")
    _field(value, "id", 1, F.TYPE_INT32)
    _field(value, "name", 2, F.TYPE_STRING)
    source = file.message_type.add(name="Source")
    for number, (name, ftype) in enumerate(
        [("version", F.TYPE_STRING), ("ts_ms", F.TYPE_INT64), ("sequence", F.TYPE_STRING),
         ("schema", F.TYPE_STRING), ("table", F.TYPE_STRING), ("txId", F.TYPE_INT64), ("lsn", F.TYPE_INT64)],
        start=1,
    ):  # fmt: skip
        _field(source, name, number, ftype)
    env = file.message_type.add(name="Envelope")
    _field(env, "before", 1, F.TYPE_MESSAGE, type_name=".pg.public.customers.Value")
    _field(env, "after", 2, F.TYPE_MESSAGE, type_name=".pg.public.customers.Value")
    _field(env, "source", 3, F.TYPE_MESSAGE, type_name=".pg.public.customers.Source")
    _field(env, "op", 4, F.TYPE_STRING)
    _field(env, "ts_ms", 5, F.TYPE_INT64)
    pool = DescriptorPool()
    pool.Add(file)
    envelope_cls = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("pg.public.customers.Envelope")
    )
    registry = mock_registry()
    src = {
        "version": "3.6.1.Final",
        "ts_ms": 1,
        "sequence": '["40","50"]',
        "schema": "public",
        "table": "customers",
        "txId": 9,
        "lsn": 50,
    }
    created = proto_bytes(
        registry, TOPIC, envelope_cls(after={"id": 3, "name": "p"}, source=src, op="c", ts_ms=2)
    )
    deleted = proto_bytes(
        registry, TOPIC, envelope_cls(before={"id": 3}, source={**src, "lsn": 60}, op="d", ts_ms=3)
    )
    fmt = FormatSpec(format="protobuf", envelope="debezium")
    schema = resolve_schema(
        TOPIC, fmt, None, ("cdc_op", "cdc_lsn", "cdc_last_commit_lsn"), registry
    ).arrow_schema
    assert schema.names[:2] == ["id", "name"]
    spec = DecoderSpec(TOPIC, fmt, None, (), registry, serialize_schema(schema))
    decoder = ChunkDecoder(build_decoder(spec), schema, None, "run")
    out = decode(
        decoder, [KafkaMessage(TOPIC, 0, i, 1, None, v) for i, v in enumerate([created, deleted])]
    )
    assert [
        (r["id"], r["name"], r["_cdc_op"], r["_cdc_lsn"], r["_cdc_last_commit_lsn"])
        for r in out.to_pylist()
    ] == [
        (3, "p", "c", 50, 40),
        (3, "", "d", 60, 40),  # proto3: an unset string is ""
    ]


# ------------------------------------------------------------------ order and runs


def test_a_source_position_orders_changes_and_kafka_order_decides_without_one() -> None:
    def positions(commit: list[int | None], lsn: list[int | None], offset: list[int]) -> pa.Table:
        n = len(offset)
        return pa.table(
            {
                "_cdc_last_commit_lsn": pa.array(commit, pa.int64()),
                "_cdc_lsn": pa.array(lsn, pa.int64()),
                "_kafka_timestamp": pa.array([1] * n, pa.timestamp("us", tz="UTC")),
                "_kafka_partition": pa.array([0] * n, pa.int32()),
                "_kafka_offset": pa.array(offset, pa.int64()),
            }
        )

    # A replayed older change at a later offset is not later; a later commit beats a
    # smaller change LSN (the interleaved transactions of PostgreSQL's WAL); a change
    # without a source position (a tombstone) is ordered by Kafka position; a snapshot
    # read (no last commit) comes before streamed changes.
    new = positions([100, 200, None, 100, None], [150, 120, None, 150, 5], [9, 9, 9, 9, 9])
    old = positions([100, 100, 100, 100, 100], [160, 180, 180, 150, 180], [1, 1, 1, 1, 1])
    assert later(new, old, cdc=True).tolist() == [False, True, True, True, False]
    assert later(old, new, cdc=True).tolist() == [True, False, False, False, True]


class Mirror:
    """A mirror table and its deletes table; runs decoded by the read tasks' decoder and
    merged and published as apply's shared path does."""

    def __init__(self, catalog: Any, registry: RegistrySettings, namespace: str = "ns") -> None:
        self.identifier = f"{namespace}.m"
        self.catalog = catalog
        self.registry = registry
        self.decoded = target(registry, ("cdc_last_commit_lsn", "cdc_lsn"))
        schema = self.decoded
        for name, data_type in POSITION_COLUMNS.items():
            schema = schema.append(pa.field(name, data_type))
        catalog.create_table(self.identifier, schema, properties={"format-version": "2"})
        self.deletes = DeletesTable(catalog, (namespace, "m__tableflow_deletes"), ("id",), cdc=True)

    def apply(self, messages: list[KafkaMessage]) -> None:
        decoder = chunk_decoder(self.registry, self.decoded, mirror=True)
        decoded = decode(decoder, messages)
        assert decoded.column(BAD_RECORD_COLUMN).null_count == decoded.num_rows
        rows = decoded.select(
            [n for n in decoded.schema.names if not is_hidden(n) or n in UPSERT_SOURCE_COLUMNS]
        )
        table = self.catalog.load_table(self.identifier)
        base = table.metadata.current_snapshot_id
        delta = merge_batch(
            table, base, rows, ("id",), self.deletes.read, {}, cdc=True,
            remember=self.deletes.remember,
        )  # fmt: skip
        if base is None:
            with table.transaction() as tx, tx.update_snapshot().fast_append():
                pass
            table = self.catalog.load_table(self.identifier)
            base = table.metadata.current_snapshot_id
        publish_run(
            table, base, "tableflow_run_test", {"tableflow.test": "1"},
            data_files=delta.data_files, delete_files=delta.delete_files, new_branch=True,
        )  # fmt: skip

    def rows(self) -> dict[int, tuple[str | None, int]]:
        read = self.catalog.load_table(self.identifier).scan().to_arrow()
        found = {r["id"]: (r["name"], r["_cdc_lsn"]) for r in read.to_pylist()}
        assert len(found) == read.num_rows, "one row per key"
        return found


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_mirror_equals_the_source_whatever_the_run_boundaries(catalog: Any, seed: int) -> None:
    rng = random.Random(seed)
    registry = mock_registry()
    changes, expected = workload(rng, keys=30, transactions=60)
    messages = to_partitions(register_and_encode(registry, changes), changes, partitions=3)
    by_partition: dict[int, list[KafkaMessage]] = {}
    for m in messages:
        by_partition.setdefault(m.partition, []).append(m)
    mirror = Mirror(catalog, registry)
    # Runs: each takes a random slice of every partition (what max_records_per_run does).
    cursors = dict.fromkeys(by_partition, 0)
    runs = 0
    while any(cursors[p] < len(log) for p, log in by_partition.items()):
        batch = []
        for p, log in by_partition.items():
            take = rng.randint(0, 25)
            batch.extend(log[cursors[p] : cursors[p] + take])
            cursors[p] += take
        if batch:
            mirror.apply(batch)
            runs += 1
    assert runs >= 5
    assert mirror.rows() == expected
    # One run of everything gives the same mirror.
    catalog.create_namespace("one")
    whole = Mirror(catalog, registry, "one")
    whole.apply(messages)
    assert whole.rows() == expected


def test_order_columns_of_a_mirror() -> None:
    assert list(order_columns(True))[:2] == [debezium.LAST_COMMIT_LSN, debezium.LSN]


@pytest.mark.parametrize(
    "sequence",
    ['[null,"24023128"]', '["24023128","24023184"]', '[ "1", "2"]', '["1","2","3"]', '["x","2"]',
     '["1",null]', '[null,null]', '["","5"]', '["12","34"', "[]", "nope", '["-1","2"]'],
)  # fmt: skip
def test_the_last_commit_lsn_fast_path_reads_as_the_json_parse(sequence: str) -> None:
    """`last_commit_lsn` reads Debezium's layout without a JSON parse: the same answer
    (or the same error) as parsing it."""

    def parsed(text: str) -> Any:
        try:
            items = json.loads(text)
        except ValueError:
            return "error"
        if not isinstance(items, list) or len(items) != 2:
            return "error"
        try:
            return None if items[0] is None else int(items[0])
        except (TypeError, ValueError):
            return "error"

    try:
        got: Any = debezium.last_commit_lsn({"sequence": sequence})
    except debezium.PayloadError:
        got = "error"
    assert got == parsed(sequence)
