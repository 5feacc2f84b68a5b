"""Bad records through every sink with real components.

A poison topic (Avro via confluent-kafka's AvroSerializer and the test registry, plus
records with a wrong magic byte, an unknown schema id and a truncated payload) is
decoded by the real decoder; its failures and the rows a row-level check rejects become
rejected rows at known offsets. `fetch_originals` re-reads them in Spark tasks; the sinks
write them to an Iceberg table (read back by pyiceberg and DuckDB) and a Kafka topic
(consumed back with headers).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.expressions import And, EqualTo

from tableflow_core.config.models.dead_letter import IcebergDeadLetter, KafkaDeadLetter
from tableflow_core.deadletter.accounting import RunAccounting
from tableflow_core.deadletter.errors import (
    BadRecordsFailure,
    DeadLetterDeliveryError,
    DeadLetterTableError,
)
from tableflow_core.deadletter.frames import spark_schema
from tableflow_core.deadletter.headers import decode_error_headers
from tableflow_core.deadletter.originals import fetch_originals
from tableflow_core.deadletter.replay import replay_records
from tableflow_core.deadletter.sinks import SinkContext, kafka_topic, route_bad_records
from tableflow_core.deadletter.sinks.iceberg_driver_append import DRIVER_WRITER, WRITER_PROPERTY
from tableflow_core.deadletter.sinks.iceberg_table import create_dlq_table
from tableflow_core.deadletter.suspension import Suspension
from tableflow_core.dev.processes import free_port
from tableflow_core.engine.spark_session import register_catalog
from tableflow_core.ingest.bad_records import BAD_RECORD_SCHEMA, REJECTED_ROW_SCHEMA
from tableflow_core.kafka.admin import get_watermarks
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.kafka.range_reader import read_range
from tableflow_core.pipeline.runners.dead_letter import CatalogTables
from tableflow_core.schemas.decoding import DecoderSpec, build_decoder, serialize_schema
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import resolve_schema
from tests.fixtures.catalog import CatalogServer, unique_namespace
from tests.fixtures.poison import framing_poison
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.integration.test_cli_basics import tableflow
from tests.unit.test_engine_helpers import duckdb_connection

pytestmark = pytest.mark.slow

CATALOG = "tf_deadletter"
SCHEMA = {
    "type": "record",
    "name": "Payment",
    "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
}
# Recent: a broker's time-based retention would delete records stamped long ago.
BASE_TS = int(datetime.now(UTC).timestamp() * 1000) - 60_000
# (partition, kind) per offset; kinds: good, negative (check rejects), magic, unknown_id, truncated
LAYOUT = {
    0: ["good", "magic", "good", "truncated", "negative", "good"],
    1: ["unknown_id", "good", "negative", "good", "magic"],
}


@dataclass(frozen=True)
class Produced:
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    timestamp_ms: int


@dataclass
class Poison:
    topic: str
    kafka_conf: dict[str, str]
    produced: dict[tuple[int, int], Produced]
    rejected: list[dict[str, Any]]  # REJECTED_ROW_SCHEMA rows
    written: dict[tuple[int, int], int]  # (partition, offset) -> id, rows that pass

    def rejected_frame(self, spark: Any) -> Any:
        return spark.createDataFrame(
            [tuple(r[n] for n in REJECTED_ROW_SCHEMA.names) for r in self.rejected],
            spark_schema(REJECTED_ROW_SCHEMA),
        )


def _payload(serializer: AvroSerializer, topic: str, i: int, amount: float) -> bytes:
    data = serializer({"id": i, "amount": amount}, SerializationContext(topic, MessageField.VALUE))
    assert data is not None
    return data


@pytest.fixture(scope="module")
def poison(kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer) -> Iterator[Poison]:
    topic = kafka_broker.create_topic(unique_name("poison"), len(LAYOUT))
    registry = RegistrySettings(url=schema_registry.url)
    serializer = AvroSerializer(registry.client(), json.dumps(SCHEMA))
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    produced: dict[tuple[int, int], Produced] = {}
    for partition, kinds in LAYOUT.items():
        for offset, kind in enumerate(kinds):
            i = partition * 100 + offset
            good = _payload(serializer, topic, i, -5.0 if kind == "negative" else 10.0 + i)
            record = Produced(
                key=f"k{i}".encode(),
                value=framing_poison(kind, good),
                headers=[("trace", f"t{i}".encode()), ("bin", bytes([0, 255, i]))],
                timestamp_ms=BASE_TS + i,
            )
            producer.produce(
                topic,
                record.value,
                record.key,
                partition=partition,
                headers=record.headers,
                timestamp=record.timestamp_ms,
            )
            produced[(partition, offset)] = record
    assert producer.flush(10) == 0
    conf = {"bootstrap.servers": kafka_broker.bootstrap}

    # Decode with the real decoder, as the pipeline's decode stage does in its tasks.
    metadata = ("partition", "offset")
    resolved = resolve_schema(topic, FormatSpec(format="avro"), None, metadata, registry)
    decoder = build_decoder(
        DecoderSpec(
            topic,
            FormatSpec(format="avro"),
            None,
            metadata,
            registry,
            serialize_schema(resolved.arrow_schema),
        )
    )
    rejected: list[dict[str, Any]] = []
    written: dict[tuple[int, int], int] = {}
    for partition, (_low, high) in get_watermarks(conf, topic).items():
        for messages in read_range(conf, OffsetRange(topic, partition, 0, high)):
            result = decoder.decode(messages)
            for failure in result.failures:
                rejected.append(
                    {
                        "source_partition": failure.partition,
                        "source_offset": failure.offset,
                        "stage": "decode",
                        "error_class": "DecodeFailure",
                        "error_message": failure.reason,
                    }
                )
            for row in result.batch.to_pylist():
                where = (row["_kafka_partition"], row["_kafka_offset"])
                if row["amount"] < 0:  # the row-level check `amount >= 0`
                    rejected.append(
                        {
                            "source_partition": where[0],
                            "source_offset": where[1],
                            "stage": "check",
                            "error_class": "ExpressionCheck",
                            "error_message": "amount >= 0 failed",
                        }
                    )
                else:
                    written[where] = row["id"]
    yield Poison(topic, conf, produced, rejected, written)


def _bad_kinds(poison: Poison) -> dict[tuple[int, int], str]:
    return {(r["source_partition"], r["source_offset"]): r["stage"] for r in poison.rejected}


def test_the_decoder_rejects_exactly_the_poison_offsets(poison: Poison) -> None:
    expected = {
        (p, o): ("check" if kind == "negative" else "decode")
        for p, kinds in LAYOUT.items()
        for o, kind in enumerate(kinds)
        if kind != "good"
    }
    assert _bad_kinds(poison) == expected


def test_fetch_originals_returns_the_exact_original_records(spark: Any, poison: Poison) -> None:
    failed_at = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    bad = fetch_originals(
        spark,
        poison.rejected_frame(spark),
        poison.topic,
        poison.kafka_conf,
        "run-1",
        failed_at=failed_at,
    )
    assert bad.columns == BAD_RECORD_SCHEMA.names
    rows = bad.collect()
    assert len(rows) == len(poison.rejected)
    stages = _bad_kinds(poison)
    for row in rows:
        where = (row["source_partition"], row["source_offset"])
        original = poison.produced[where]
        assert row["source_topic"] == poison.topic
        assert bytes(row["key"]) == original.key
        assert bytes(row["value"]) == original.value
        assert [(h["key"], bytes(h["value"])) for h in row["headers"]] == original.headers
        assert int(row["source_timestamp"].timestamp() * 1000) == original.timestamp_ms
        assert row["stage"] == stages[where]
        assert row["run_id"] == "run-1"
        assert row["failed_at"].astimezone(UTC) == failed_at


@pytest.fixture(scope="module")
def spark_catalog(spark: Any, catalog_server: CatalogServer) -> str:
    register_catalog(spark, CATALOG, catalog_server.spark_properties())
    return CATALOG


def _dlq_rows(catalog_server: CatalogServer, identifier: str) -> list[dict[str, Any]]:
    table = catalog_server.pyiceberg_catalog().load_table(identifier)
    return table.scan().to_arrow().to_pylist()


def test_iceberg_dlq_written_twice_holds_no_duplicates(
    spark: Any,
    spark_catalog: str,
    catalog_server: CatalogServer,
    kafka_broker: KafkaBroker,
    stack_project: Any,
    poison: Poison,
) -> None:
    identifier = f"{unique_namespace('dlq')}.bad_records"
    create_dlq_table(spark, spark_catalog, identifier)
    target = IcebergDeadLetter(type="iceberg", table=identifier)
    context = SinkContext(table="payments", run_id="run-1", spark_catalog=spark_catalog)
    rejected = poison.rejected_frame(spark)

    first = route_bad_records(
        fetch_originals(spark, rejected, poison.topic, poison.kafka_conf, "run-1"),
        "dlq",
        target,
        context,
    )
    # A re-run after a crash between the DLQ write and the table's publish routes the same
    # records again, under a new run id.
    again = route_bad_records(
        fetch_originals(spark, rejected, poison.topic, poison.kafka_conf, "run-2"),
        "dlq",
        target,
        SinkContext(table="payments", run_id="run-2", spark_catalog=spark_catalog),
    )
    assert first.outcome == again.outcome == "dead_lettered"
    assert first.per_partition == again.per_partition == {0: 3, 1: 3}

    rows = _dlq_rows(catalog_server, identifier)
    keys = [
        (r["source_topic"], r["source_partition"], r["source_offset"], r["stage"]) for r in rows
    ]
    assert len(keys) == len(set(keys)) == len(poison.rejected)
    assert {r["run_id"] for r in rows} == {"run-1"}  # the re-run added nothing
    for row in rows:
        original = poison.produced[(row["source_partition"], row["source_offset"])]
        assert (row["key"], row["value"]) == (original.key, original.value)
        assert [(h["key"], h["value"]) for h in row["headers"]] == original.headers
    schema = catalog_server.pyiceberg_catalog().load_table(identifier).schema()
    assert [f.name for f in schema.fields] == BAD_RECORD_SCHEMA.names

    # An independent reader sees the same rows.
    table = catalog_server.pyiceberg_catalog().load_table(identifier)
    count, distinct, decode_rows = duckdb_connection().sql(
        "SELECT count(*), count(DISTINCT (source_partition, source_offset)), "
        "count(*) FILTER (WHERE stage = 'decode') "
        f"FROM iceberg_scan('{table.metadata_location}')"
    ).fetchone() or (None, None, None)
    assert (count, distinct, decode_rows) == (6, 6, 4)

    # `tableflow query` reads the dead-letter table (DuckDB attached to the REST catalog).
    project = stack_project(
        namespace=identifier.split(".")[0],
        tables=[
            {
                "name": "payments",
                "topic": poison.topic,
                "on_error": "dlq",
                "dlq": {"type": "iceberg", "table": identifier},
            }
        ],
    )
    value_bytes = sum(len(r["value"]) for r in rows)
    queried = tableflow(
        "query",
        f"SELECT count(*) AS n, count(DISTINCT (source_partition, source_offset)) AS d, "
        f"sum(octet_length(value))"
        f" AS b, max(len(headers)) AS h FROM {identifier}",
        cwd=project,
    )
    assert queried.returncode == 0, queried.stderr
    assert [int(x) for x in queried.stdout.split("│")[-5:-1]] == [6, 6, value_bytes, 2]

    # Every offset of the poison topic lands in exactly one place: the table or the DLQ.
    dead = {(r["source_partition"], r["source_offset"]) for r in rows}
    assert dead.isdisjoint(poison.written)
    assert dead | set(poison.written) == set(poison.produced)
    read = {p: len(kinds) for p, kinds in LAYOUT.items()}
    written: dict[int, int] = {}
    for partition, _offset in poison.written:
        written[partition] = written.get(partition, 0) + 1
    accounting = RunAccounting.from_counts(
        "payments",
        poison.topic,
        "run-1",
        read=read,
        written=written,
        dead_lettered=first.per_partition,
    ).check()
    assert accounting.totals["read"] == 11

    # Replay (docs/error-handling.md): the DLQ rows re-produced carry the original bytes.
    decode_rows = (
        catalog_server.pyiceberg_catalog()
        .load_table(identifier)
        .scan(row_filter=And(EqualTo("source_topic", poison.topic), EqualTo("stage", "decode")))
        .to_arrow()
        .to_pylist()
    )
    replay_topic = kafka_broker.create_topic(unique_name("replay"), 1)
    assert replay_records(poison.kafka_conf, replay_topic, decode_rows) == 4
    replayed = _consume_all(kafka_broker.bootstrap, replay_topic, 4)
    decode_failures = {
        (poison.produced[w].key, poison.produced[w].value)
        for w, stage in _bad_kinds(poison).items()
        if stage == "decode"
    }
    assert {(m.key(), m.value()) for m in replayed} == decode_failures and len(replayed) == 4
    assert all(m.headers()[-1][0] == "tableflow.replayed.from" for m in replayed)


def test_iceberg_dlq_driver_append_and_spark_merge_keep_each_record_once(
    spark: Any, spark_catalog: str, catalog_server: CatalogServer, poison: Poison
) -> None:
    """A batch small enough for the driver's pyiceberg append, then the same records again
    through Spark's MERGE (a batch over the budget) and the driver: each record once."""
    identifier = f"{unique_namespace('dlq')}.bad_records"
    create_dlq_table(spark, spark_catalog, identifier)
    target = IcebergDeadLetter(type="iceberg", table=identifier)
    tables = CatalogTables(catalog_server.pyiceberg_catalog())
    rejected = poison.rejected_frame(spark)

    def route(run_id: str, driver: bool) -> None:
        bad = fetch_originals(spark, rejected, poison.topic, poison.kafka_conf, run_id)
        context = SinkContext(
            table="payments",
            run_id=run_id,
            spark_catalog=spark_catalog,
            iceberg_tables=tables if driver else None,
        )
        assert route_bad_records(bad, "dlq", target, context).per_partition == {0: 3, 1: 3}

    route("run-1", driver=True)
    table = catalog_server.pyiceberg_catalog().load_table(identifier)
    first = table.current_snapshot()
    assert first is not None and first.summary[WRITER_PROPERTY] == DRIVER_WRITER
    route("run-2", driver=False)
    merged = catalog_server.pyiceberg_catalog().load_table(identifier).metadata.snapshots
    route("run-3", driver=True)
    table = catalog_server.pyiceberg_catalog().load_table(identifier)
    # The driver's re-run found every key and committed nothing.
    assert table.metadata.snapshots == merged, [s.summary for s in table.metadata.snapshots]
    count, distinct, runs = duckdb_connection().sql(
        "SELECT count(*), count(DISTINCT (source_partition, source_offset, stage)), "
        f"string_agg(DISTINCT run_id) FROM iceberg_scan('{table.metadata_location}')"
    ).fetchone() or (None, None, None)
    assert (count, distinct, runs) == (6, 6, "run-1")  # run-2's MERGE matched the driver's


@pytest.mark.parametrize("driver", [False, True], ids=["spark", "driver"])
def test_iceberg_sink_refuses_a_missing_table(
    spark: Any, spark_catalog: str, catalog_server: CatalogServer, poison: Poison, driver: bool
) -> None:
    target = IcebergDeadLetter(type="iceberg", table=f"{unique_namespace('nope')}.missing")
    bad = fetch_originals(spark, poison.rejected_frame(spark), poison.topic, poison.kafka_conf, "r")
    tables = CatalogTables(catalog_server.pyiceberg_catalog()) if driver else None
    context = SinkContext(
        table="payments", run_id="r", spark_catalog=spark_catalog, iceberg_tables=tables
    )
    with pytest.raises(
        DeadLetterTableError, match=r"missing in catalog 'tf_deadletter' does not exist"
    ):
        route_bad_records(bad, "dlq", target, context)


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[Any]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_name("g"), "enable.auto.commit": False}
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    messages: list[Any] = []
    for _ in range(30):
        messages.extend(m for m in consumer.consume(100, timeout=1.0) if m.error() is None)
        if len(messages) >= expected:
            break
    consumer.close()
    return messages


def test_kafka_dlq_carries_original_bytes_and_error_headers(
    spark: Any, kafka_broker: KafkaBroker, poison: Poison
) -> None:
    dlq_topic = kafka_broker.create_topic(unique_name("dlq"), 2)
    context = SinkContext(table="payments", run_id="run-k", kafka_conf=poison.kafka_conf)
    bad = fetch_originals(
        spark, poison.rejected_frame(spark), poison.topic, poison.kafka_conf, "run-k"
    )
    result = route_bad_records(bad, "dlq", KafkaDeadLetter(type="kafka", topic=dlq_topic), context)
    assert result.per_partition == {0: 3, 1: 3}
    assert result.destination == f"kafka topic {dlq_topic}"

    messages = _consume_all(kafka_broker.bootstrap, dlq_topic, 6)
    assert len(messages) == 6
    stages = _bad_kinds(poison)
    seen = set()
    for message in messages:
        headers = message.headers()
        errors = decode_error_headers(headers)
        where = (
            int(errors["tableflow.error.source.partition"]),
            int(errors["tableflow.error.source.offset"]),
        )
        original = poison.produced[where]
        assert (message.key(), message.value()) == (original.key, original.value)
        assert headers[:2] == original.headers
        assert errors["tableflow.error.source.topic"] == poison.topic
        assert errors["tableflow.error.stage"] == stages[where]
        assert errors["tableflow.error.run.id"] == "run-k"
        assert errors["tableflow.error.source.timestamp"] == str(original.timestamp_ms)
        assert errors["tableflow.error.class"] in ("DecodeFailure", "ExpressionCheck")
        seen.add(where)
    assert seen == set(stages)


def test_skip_counts_and_fail_names_the_first_offset(spark: Any, poison: Poison) -> None:
    bad = fetch_originals(spark, poison.rejected_frame(spark), poison.topic, poison.kafka_conf, "s")
    context = SinkContext(table="payments", run_id="s")
    skipped = route_bad_records(bad, "skip", None, context)
    assert (skipped.outcome, skipped.per_partition) == ("skipped", {0: 3, 1: 3})
    with pytest.raises(BadRecordsFailure) as info:
        route_bad_records(bad, "fail", None, context)
    message = str(info.value)
    assert f"topic {poison.topic!r} partition 0 offset 1 (decode)" in message
    assert "and more" in message
    suspension = Suspension.from_failure(info.value, poison.topic, "s")
    assert (suspension.partition, suspension.offset) == (0, 1)
    assert suspension.reason.startswith("DecodeFailure: ") and suspension.reason.endswith(
        "(decode)"
    )


def test_kafka_dlq_delivery_failure_names_the_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_topic, "FLUSH_TIMEOUT_S", 2.0)
    bootstrap = f"127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    row = {
        "source_topic": "t",
        "source_partition": 0,
        "source_offset": 9,
        "source_timestamp": None,
        "key": None,
        "value": b"x",
        "headers": [],
        "stage": "decode",
        "error_class": "E",
        "error_message": "m",
        "run_id": "r",
        "failed_at": datetime.now(UTC),
    }
    batch = pa.RecordBatch.from_pylist([row], schema=BAD_RECORD_SCHEMA)
    with pytest.raises(DeadLetterDeliveryError) as info:
        kafka_topic.produce_rows({"bootstrap.servers": bootstrap}, "dlq", [batch])
    message = str(info.value)
    assert bootstrap in message and "'dlq'" in message and "offset 9" in message
