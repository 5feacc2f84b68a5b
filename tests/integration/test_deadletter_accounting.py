"""The run's accounting through `plan` + `apply`: row-level checks and clean tables.

Records are produced with confluent-kafka's AvroSerializer against the test registry.

- Rows failing a check with `on_failure: dlq` reach the dead-letter target with stage
  `check`, error class `CheckFailed` and a message naming the check, and their original
  bytes; rows failing a check with `on_failure: skip` are counted as `skipped` (not
  `filtered`, which is what a `filter` transform removes), per partition.
- A table with `on_error: fail` and nothing rejected still gets its accounting, in
  run_results.json and in the published snapshot's summary: read = written + filtered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.deadletter.accounting import RunAccounting
from tableflow_core.runner.results import TableResult
from tableflow_core.state.offsets import OFFSETS_KEY
from tests.avro_records import avro_record
from tests.fixtures.apply_env import Env, apply
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.integration.test_deadletter_formats import dlq_table_rows, dlq_topic_rows

pytestmark = pytest.mark.slow

SCHEMA = avro_record("Order", id="long", amount="double", status="string")
PARTITIONS = 2
PER_PARTITION = 12


def status_of(i: int) -> str:
    return "void" if i % 5 == 0 else "open"  # ids 0, 5, 10, 105, 110: 5 per topic


def amount_of(i: int) -> float:
    return 1000.0 if i % 4 == 1 else float(i)  # ids 1, 5, 9, 101, 105, 109


@dataclass(frozen=True)
class Topic:
    name: str
    values: dict[tuple[int, int], bytes]

    def ids(self) -> dict[int, tuple[int, int]]:
        return {p * 100 + o: (p, o) for p, o in self.values}


@pytest.fixture(scope="module")
def orders(kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer) -> Topic:
    topic = kafka_broker.create_topic(unique_name("orders"), PARTITIONS)
    serialize = AvroSerializer(schema_registry.client(), json.dumps(SCHEMA))
    producer = Producer(kafka_broker.producer_config())
    values = {}
    for p in range(PARTITIONS):
        for o in range(PER_PARTITION):
            i = p * 100 + o
            record = {"id": i, "amount": amount_of(i), "status": status_of(i)}
            value = serialize(record, SerializationContext(topic, MessageField.VALUE))
            assert value is not None
            values[(p, o)] = value
            producer.produce(topic, value, f"k{i}".encode(), partition=p)
    assert producer.flush(10) == 0
    return Topic(topic, values)


def table_ids(env: Env) -> set[int]:
    ids = env.landed_ids()
    assert len(ids) == len(set(ids))
    return set(ids)


def accounting_of(env: Env, result: TableResult) -> dict[int, dict[str, int]]:
    """Per-partition accounting, the same in run_results.json and the published snapshot."""
    on_disk = json.loads((env.root / "target" / "run_results.json").read_text())
    (table,) = on_disk["tables"]
    accounting = table["accounting"]
    assert accounting is not None and accounting == result.accounting
    snapshot = env.pyiceberg_table().current_snapshot()
    assert snapshot is not None
    summary = snapshot.summary.additional_properties
    assert OFFSETS_KEY in summary
    stored = RunAccounting.from_snapshot_summary(summary, "t")
    assert stored is not None and stored.to_json()["partitions"] == accounting["partitions"]
    assert stored.run_id == accounting["run_id"]
    return {
        p["partition"]: {k: v for k, v in p.items() if k != "partition"}
        for p in accounting["partitions"]
    }


def expected_accounting(**by_outcome: set[int]) -> dict[int, dict[str, int]]:
    """Per partition: read all; each outcome's count from its set of ids; written the rest."""
    figures = {}
    for p in range(PARTITIONS):
        ids = {p * 100 + o for o in range(PER_PARTITION)}
        counts = {name: len(ids & chosen) for name, chosen in by_outcome.items()}
        row = dict.fromkeys(("filtered", "skipped", "dead_lettered", "tombstones"), 0)
        row |= counts
        row["read"] = PER_PARTITION
        row["written"] = PER_PARTITION - sum(counts.values())
        figures[p] = row
    return figures


ALL_IDS = {p * 100 + o for p in range(PARTITIONS) for o in range(PER_PARTITION)}
VOID = {i for i in ALL_IDS if status_of(i) == "void"}
LARGE = {i for i in ALL_IDS if amount_of(i) > 500}
ODD = {i for i in ALL_IDS if i % 2}


@pytest.mark.parametrize("target", ["iceberg", "kafka"])
def test_check_dlq_rows_are_dead_lettered_and_skip_rows_counted_as_skipped(
    spark: Any, make_env: Any, orders: Topic, kafka_broker: KafkaBroker, target: str
) -> None:
    if target == "iceberg":
        identifier = f"{unique_namespace('dlq')}.check_rejects"
        dlq: dict[str, str] = {"type": "iceberg", "table": identifier}
    else:
        identifier = kafka_broker.create_topic(unique_name("check_dlq"), 1)
        dlq = {"type": "kafka", "topic": identifier}
    env = make_env(
        orders.name,
        metadata_columns=[],
        dlq=dlq,  # on_error stays fail: the checks' own policies route their rows
        transforms=[{"type": "filter", "where": "id % 2 = 0"}],
        checks=[
            {
                "type": "accepted_values",
                "column": "status",
                "values": ["open"],
                "on_failure": "skip",
            },
            {
                "type": "expression",
                "name": "small_amount",
                "expression": "amount < 500",
                "on_failure": "dlq",
            },
        ],
    )
    result = apply(spark, env)
    filtered = ODD
    dead = LARGE - filtered  # dead-lettering wins over skipping
    skipped = VOID - filtered - dead
    assert table_ids(env) == ALL_IDS - filtered - dead - skipped
    assert accounting_of(env, result) == expected_accounting(
        filtered=filtered, skipped=skipped, dead_lettered=dead
    )
    assert result.records_skipped == len(skipped)
    assert result.records_dead_lettered == len(dead)
    head = env.pyiceberg_table().current_snapshot()
    assert head is not None  # the published head carries the checks' summary too
    assert head.summary.additional_properties["tableflow.checks.skipped-rows"] == str(len(skipped))

    if target == "iceberg":
        rows = dlq_table_rows(env, identifier)
    else:
        rows = dlq_topic_rows(kafka_broker, identifier, len(dead))
    assert len(rows) == len(dead)
    by_id = orders.ids()
    assert {(r["source_partition"], r["source_offset"]) for r in rows} == {by_id[i] for i in dead}
    for row in rows:
        assert row["source_topic"] == orders.name and row["stage"] == "check"
        assert row["error_message"] == "check small_amount failed"
        assert row["value"] == orders.values[(row["source_partition"], row["source_offset"])]
        if target == "iceberg":
            assert row["error_class"] == "CheckFailed"


def test_fail_table_with_nothing_rejected_gets_its_accounting(
    spark: Any, make_env: Any, orders: Topic
) -> None:
    env = make_env(orders.name, metadata_columns=[])  # on_error: fail, no transforms
    result = apply(spark, env)
    assert table_ids(env) == ALL_IDS
    assert accounting_of(env, result) == expected_accounting()
    assert result.records_written == len(ALL_IDS)
    assert result.records_skipped == 0 and result.records_dead_lettered == 0

    filtering = make_env(
        orders.name, metadata_columns=[], transforms=[{"type": "filter", "where": "id % 2 = 0"}]
    )
    filtered = apply(spark, filtering)
    assert table_ids(filtering) == ALL_IDS - ODD
    assert accounting_of(filtering, filtered) == expected_accounting(filtered=ODD)
