"""JSON Schema and plain JSON topics, with every metadata column, through apply.

Two tables in one apply run concurrently in the Spark application; DuckDB reads
the results back from the Iceberg metadata the REST catalog points at.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.config.loader import load_project
from tableflow_core.readers.duckdb_reader import duckdb_connection
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.stack import unique_name
from tests.json_schemas import json_object

pytestmark = pytest.mark.slow

PAYMENT_SCHEMA = json_object(
    "Payment",
    payment_id="string",
    amount_cents="integer",
    paid_at={"type": "string", "format": "date-time"},
    card={
        "type": "object",
        "properties": {"brand": {"type": "string"}, "last4": {"type": "string"}},
    },
    required=["payment_id", "amount_cents"],
)
COUNT = 40


def test_json_schema_and_plain_json_tables_with_metadata_columns(
    stack_project, kafka_broker, schema_registry, catalog_server, spark
) -> None:
    payments, clicks = unique_name("payments"), unique_name("clicks")
    kafka_broker.create_topics({payments: 2, clicks: 1})
    serialize = JSONSerializer(
        json.dumps(PAYMENT_SCHEMA), SchemaRegistryClient({"url": schema_registry.url})
    )
    producer = Producer(kafka_broker.producer_config())
    # Record timestamps are left to the producer (CreateTime = now).
    produced_from = datetime.now(UTC).replace(microsecond=0)
    for i in range(COUNT):
        payment = {
            "payment_id": f"p{i}",
            "amount_cents": 100 + i,
            "paid_at": f"2026-11-01T10:00:{i:02d}Z",
            "card": {"brand": "visa", "last4": f"{i:04d}"},
        }
        value = serialize(payment, SerializationContext(payments, MessageField.VALUE))
        producer.produce(
            payments, key=f"p{i}", value=value, partition=i % 2,
            headers=[("source", b"checkout"), ("attempt", str(i % 3).encode())],
        )  # fmt: skip
        click = {"user": {"id": i}, "page": f"/item/{i}", "ms": 1.5 * i}
        producer.produce(clicks, value=json.dumps(click).encode())
    assert producer.flush(30) == 0
    produced_to = datetime.now(UTC)

    namespace = unique_namespace("fmt")
    root = stack_project(
        namespace=namespace,
        tables=[
            {
                "name": "payments",
                "topic": payments,
                "value": {"format": "json_schema"},
                "key": {"format": "string"},
                "metadata_columns": ["topic", "partition", "offset", "timestamp", "key", "headers"],
            },
            {
                "name": "clicks",
                "topic": clicks,
                "value": {
                    "format": "json",
                    "columns": [
                        {"name": "user_id", "type": "long", "path": "user.id"},
                        {"name": "page", "type": "string"},
                        {"name": "ms", "type": "double"},
                    ],
                },
            },
        ],
    )
    project = load_project(root)
    plan = PlanTask(project, project.tables).run()
    assert not plan.blockers, plan.blockers
    results = ApplyTask(project, plan, spark=spark).run()
    assert results.status == "success", results.errors
    assert {r.table: r.records_written for r in results.tables} == {
        "payments": COUNT,
        "clicks": COUNT,
    }

    catalog = catalog_server.pyiceberg_catalog()
    con = duckdb_connection()

    def scan(table: str) -> str:
        return f"iceberg_scan('{catalog.load_table(f'{namespace}.{table}').metadata_location}')"

    row = con.sql(
        f"SELECT count(*), sum(amount_cents), count(DISTINCT payment_id), min(paid_at), "
        f"max(card.last4), count(DISTINCT _kafka_partition), max(_kafka_offset), "
        f"min(_kafka_timestamp), max(_kafka_timestamp), "
        f"count(*) FILTER (WHERE _kafka_key = payment_id), "
        f"any_value(_kafka_topic) FROM {scan('payments')}"
    ).fetchone()
    assert row is not None
    assert row[0] == COUNT and row[1] == sum(100 + i for i in range(COUNT)) and row[2] == COUNT
    assert row[3] == datetime(2026, 11, 1, 10, 0, 0, tzinfo=UTC)
    assert row[4] == f"{COUNT - 1:04d}"
    assert row[5] == 2 and row[6] == COUNT // 2 - 1
    assert produced_from <= row[7] <= row[8] <= produced_to  # Kafka timestamps, with time zone
    assert row[9] == COUNT  # the string key lands in _kafka_key
    assert row[10] == payments
    headers = con.sql(
        f"SELECT _kafka_headers['source'], _kafka_headers['attempt'] FROM {scan('payments')} "
        f"WHERE payment_id = 'p5'"
    ).fetchone()
    assert headers == (b"checkout", b"2")

    clicks_row = con.sql(
        f"SELECT count(*), sum(user_id), max(page), sum(ms) FROM {scan('clicks')}"
    ).fetchone()
    assert clicks_row == (
        COUNT,
        sum(range(COUNT)),
        "/item/9",
        pytest.approx(1.5 * sum(range(COUNT))),
    )


def test_protobuf_topic_through_apply(
    stack_project, kafka_broker, schema_registry, catalog_server, spark
) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    from tests.integration.test_registry_serdes import _order_message_class

    order_class = _order_message_class()
    topic = kafka_broker.create_topic(unique_name("proto_orders"), partitions=2)
    serialize = ProtobufSerializer(
        order_class, schema_registry.client(), {"use.deprecated.format": False}
    )
    producer = Producer(kafka_broker.producer_config())
    for i in range(COUNT):
        message = order_class(order_id=f"o{i}", quantity=i, tags=["a", f"t{i}"])
        producer.produce(
            topic, value=serialize(message, SerializationContext(topic, MessageField.VALUE))
        )
    assert producer.flush(30) == 0

    namespace = unique_namespace("proto")
    root = stack_project(
        namespace=namespace,
        tables=[{"name": "orders", "topic": topic, "value": {"format": "protobuf"}}],
    )
    project = load_project(root)
    results = ApplyTask(project, PlanTask(project, project.tables).run(), spark=spark).run()
    assert results.status == "success", results.errors

    table = catalog_server.pyiceberg_catalog().load_table(f"{namespace}.orders")
    row = (
        duckdb_connection()
        .sql(
            f"SELECT count(*), sum(quantity), count(DISTINCT order_id), max(len(tags)), "
            f"list_sort(list_distinct(flatten(list(tags))))[1] "
            f"FROM iceberg_scan('{table.metadata_location}')"
        )
        .fetchone()
    )
    assert row == (COUNT, sum(range(COUNT)), COUNT, 2, "a")
