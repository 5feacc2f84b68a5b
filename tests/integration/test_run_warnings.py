"""Nothing dropped or warned about silently (issue #27): null values on append tables are
in the accounting, and every warning of a table's run reaches the console of `apply` and
`run`, not only run_results.json.

Records are produced with confluent-kafka's AvroSerializer against the test registry; the
tables are read back by DuckDB and compared with a model of what should land.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.deadletter.accounting import RunAccounting
from tableflow_core.state.offsets import OFFSETS_KEY
from tests.fixtures.apply_env import apply, run_cli
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name

pytestmark = pytest.mark.slow

SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}


class Topic:
    """A topic and what was produced to it: {(partition, offset): id or None (null value)}."""

    def __init__(self, broker: KafkaBroker, registry: SchemaRegistryServer, partitions: int):
        self.name = broker.create_topic(unique_name("events"), partitions)
        self.broker = broker
        self._serialize = AvroSerializer(registry.client(), json.dumps(SCHEMA))
        self.produced: dict[tuple[int, int], int | None] = {}
        self._next = {p: 0 for p in range(partitions)}

    def produce(self, records: list[tuple[int, int | None]]) -> None:
        """(partition, id) records; id None produces a null value (a tombstone)."""
        producer = Producer(self.broker.producer_config())
        for partition, ident in records:
            value = None
            if ident is not None:
                context = SerializationContext(self.name, MessageField.VALUE)
                value = self._serialize({"id": ident, "name": f"n{ident}"}, context)
            producer.produce(self.name, value, f"k{ident}".encode(), partition=partition)
            self.produced[(partition, self._next[partition])] = ident
            self._next[partition] += 1
        assert producer.flush(10) == 0

    def delete_before(self, partition: int, offset: int) -> None:
        """Retention: the broker deletes the records of `partition` before `offset`."""
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        (future,) = admin.delete_records([TopicPartition(self.name, partition, offset)]).values()
        future.result(timeout=10)


def test_null_values_on_an_append_table_are_counted_as_tombstones_and_warned_about(
    spark: Any, make_env: Any, kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer
) -> None:
    topic = Topic(kafka_broker, schema_registry, 1)
    # 10 offsets, 3 of them null values (the first, one in the middle, the last)
    topic.produce([(0, None), (0, 1), (0, 2), (0, 3), (0, None), (0, 5), (0, 6), (0, 7),
                   (0, 8), (0, None)])  # fmt: skip
    env = make_env(topic.name, metadata_columns=[])
    result = apply(spark, env)

    model = sorted(i for i in topic.produced.values() if i is not None)
    assert env.landed_ids() == model
    assert result.offsets_after == {0: 10} and result.records_read == 10
    totals = {"read": 10, "written": 7, "filtered": 0, "skipped": 0, "dead_lettered": 0,
              "tombstones": 3}  # fmt: skip
    assert result.accounting is not None and result.accounting["totals"] == totals
    on_disk = json.loads((env.root / "target" / "run_results.json").read_text())
    (table,) = on_disk["tables"]
    assert table["accounting"]["totals"] == totals and table["records_written"] == 7
    snapshot = env.pyiceberg_table().current_snapshot()
    assert snapshot is not None
    summary = snapshot.summary.additional_properties
    assert json.loads(summary[OFFSETS_KEY])["offsets"] == {"0": 10}
    stored = RunAccounting.from_snapshot_summary(summary, "t")
    assert stored is not None and stored.totals == totals
    (warning,) = [w for w in result.warnings if "null-value" in w]
    assert "3 null-value record(s)" in warning and "partition 0: 3" in warning


def test_apply_and_run_print_every_tables_warnings(
    spark: Any, make_env: Any, kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer
) -> None:
    """Three warnings a run can give, each on the console of `apply --auto-approve` and
    of `run --once`: records deleted by retention before they were ingested, null values
    on an append table, and a dedup written again with Spark's shuffle."""
    events = Topic(kafka_broker, schema_registry, 1)
    events.produce([(0, i) for i in range(10)])
    env = make_env(events.name, metadata_columns=[])
    apply(spark, env)  # offsets committed at 10
    # Two read tasks (one per partition: 50,000 records or more each) and one key in
    # both partitions: both tasks keep it, and the run is written again with the shuffle.
    dupes = Topic(kafka_broker, schema_registry, 2)
    dupes.produce([(p, p * 100_000 + i) for p in (0, 1) for i in range(50_000)] + [(0, 7), (1, 7)])
    tables = [
        {"name": "t", "topic": events.name, "metadata_columns": [], "on_data_loss": "accept"},
        {"name": "d", "topic": dupes.name, "metadata_columns": [],
         "transforms": [{"type": "dedup", "keys": ["id"]}]},
    ]  # fmt: skip
    env.write_project(namespace=env.namespace, tables=tables, name=env.root.name)

    for command in (("apply", "--auto-approve"), ("run", "--once")):
        committed = len(events.produced)
        events.produce([(0, 100 + i) for i in range(10)] + [(0, None)])
        events.delete_before(0, committed + 5)  # retention takes 5 records not read yet
        # (accepted: the run records the loss, and warns of it)
        status, output = run_cli(env.root, *command)
        assert status == 0, output[-3000:]
        warnings = [line.strip() for line in output.splitlines() if "warning: " in line]
        gone = (
            f"partition 0: offsets {committed}..{committed + 4} (5 records) were deleted "
            "from the topic before this table read them"
        )
        assert any(gone in line for line in warnings), output[-3000:]
        assert any("1 null-value record(s)" in line for line in warnings), output[-3000:]
        results = json.loads((env.root / "target" / "run_results.json").read_text())
        by_table = {t["table"]: t for t in results["tables"]}
        if command[0] == "apply":
            assert any("written again with Spark's shuffle" in line for line in warnings)
            assert by_table["d"]["warnings"]
        # every warning of run_results.json is on the console
        for table in by_table.values():
            for warning in table["warnings"]:
                assert any(warning in line for line in warnings), (warning, output[-3000:])
        dupes.produce([(0, 7), (1, 7)])
