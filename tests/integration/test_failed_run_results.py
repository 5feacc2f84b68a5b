"""A failed run reports as much as a passing one (issue #27), in run_results.json:

- a table whose error check failed has its checks' figures (`checks`), the offsets it
  started from (`offsets_before`, and `offsets_after` equal: nothing moved), and sample
  rows naming their Kafka partition and offset, on an append table whose checks judge
  the rows written (write-audit-publish) and which has no metadata columns;
- a `row_count` check with a minimum fires on a run with no new records (its batch is
  empty): `warn` warns, `error` fails the table;
- an apply with nothing to do writes a fresh run_results.json (never the last one's);
- a run whose every due record was deleted from the topic (`on_data_loss: accept`) is a
  run with no new records too: `row_count` judges its empty batch, a warning lets it
  record the loss and move the offsets, an error fails it with nothing committed.

Records are produced with confluent-kafka's AvroSerializer against the test registry.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.avro_records import avro_record, nullable
from tests.fixtures.apply_env import Env, apply, run_cli
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name

pytestmark = pytest.mark.slow

SCHEMA = avro_record("Order", id="long", status=nullable("string"))


class Orders:
    """A 2-partition topic; `produced` maps (partition, offset) to the record."""

    def __init__(self, broker: KafkaBroker, registry: SchemaRegistryServer) -> None:
        self.name = broker.create_topic(unique_name("orders"), 2)
        self.broker = broker
        self._serialize = AvroSerializer(registry.client(), json.dumps(SCHEMA))
        self.produced: dict[tuple[int, int], dict[str, Any]] = {}

    def produce(self, records: list[tuple[int, int, str | None]]) -> None:
        """(partition, id, status) each."""
        producer = Producer(self.broker.producer_config())
        context = SerializationContext(self.name, MessageField.VALUE)
        for partition, ident, status in records:
            record = {"id": ident, "status": status}
            producer.produce(self.name, self._serialize(record, context), partition=partition)
            offset = sum(1 for p, _ in self.produced if p == partition)
            self.produced[(partition, offset)] = record
        assert producer.flush(10) == 0


@pytest.fixture
def orders(kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer) -> Orders:
    return Orders(kafka_broker, schema_registry)


def results_of(env: Env) -> dict[str, Any]:
    document = json.loads((env.root / "target" / "run_results.json").read_text())
    (table,) = document["tables"]
    return {"run": document, **table}


def test_a_failed_check_reports_its_figures_offsets_and_sample_positions(
    spark: Any, make_env: Any, orders: Orders
) -> None:
    orders.produce([(0, 1, "open"), (1, 2, "open"), (0, 3, "paid")])
    env = make_env(
        orders.name,
        metadata_columns=[],  # the positions come from the run, not from the table's columns
        transforms=[{"type": "dedup", "keys": ["id"]}],  # and against the table's rows
        checks=[{"type": "not_null", "columns": ["status"]}],  # severity error: fail
    )
    apply(spark, env)
    assert env.landed_ids() == [1, 2, 3]

    # ids 1 and 2 are in the table already (the dedup drops them); 4 and 6 have no status
    orders.produce([(0, 1, None), (0, 4, None), (1, 2, None), (1, 5, "open"), (1, 6, None)])
    failed = apply(spark, env, expect="error")
    model_failing = {(p, o) for (p, o), r in orders.produced.items()
                     if o >= (2 if p == 0 else 1) and r["status"] is None and r["id"] not in (1, 2)}  # fmt: skip
    assert model_failing == {(0, 3), (1, 3)}
    result = results_of(env)
    assert result["status"] == "error" and "not_null(status)" in result["error"]
    assert result["offsets_before"] == {"0": 2, "1": 1} == result["offsets_after"]
    checks = result["checks"]
    assert checks is not None and checks["outcome"] == "fail"
    (check,) = checks["checks"]
    assert (check["name"], check["failing"], check["rows_evaluated"]) == ("not_null(status)", 2, 3)
    positions = {(s["kafka_partition"], s["kafka_offset"]) for s in check["samples"]}
    assert positions == model_failing
    assert {s["id"] for s in check["samples"]} == {4, 6}
    assert failed.checks == checks and env.landed_ids() == [1, 2, 3]  # nothing was published


ROW_COUNT = {"type": "row_count", "min": 1}


def test_row_count_judges_a_run_with_no_new_records(
    spark: Any, make_env: Any, orders: Orders
) -> None:
    orders.produce([(0, 1, "open"), (1, 2, "open")])
    env = make_env(orders.name, metadata_columns=[], checks=[{**ROW_COUNT, "severity": "warn"}])
    apply(spark, env)
    # no new record: the run's batch is empty, and the check warns
    warned = apply(spark, env)
    assert warned.status == "success" and warned.offsets_after == {0: 1, 1: 1}
    assert warned.checks is not None
    (check,) = warned.checks["checks"]
    assert (check["outcome"], check["observed"]) == ("warn", 0)
    assert any("row_count" in w and "observed 0 rows" in w for w in warned.warnings)
    assert results_of(env)["checks"] == warned.checks

    # severity error: the table fails, and says why
    env.configure(metadata_columns=[], checks=[ROW_COUNT])
    failed = apply(spark, env, expect="error")
    assert "row_count" in (failed.error or "") and "observed 0 rows" in (failed.error or "")
    result = results_of(env)
    assert result["checks"]["outcome"] == "fail"
    assert result["offsets_before"] == {"0": 1, "1": 1} == result["offsets_after"]
    # a new record makes the check pass again
    orders.produce([(0, 3, "open")])
    assert apply(spark, env).checks["outcome"] == "pass"  # type: ignore[index]


def test_row_count_judges_a_run_whose_records_were_all_lost(
    spark: Any, make_env: Any, orders: Orders
) -> None:
    orders.produce([(0, 1, "open"), (1, 2, "open")])
    env = make_env(orders.name, metadata_columns=[], on_data_loss="accept")
    apply(spark, env)
    admin = AdminClient({"bootstrap.servers": orders.broker.bootstrap})

    def lose(until: int) -> None:
        (done,) = admin.delete_records([TopicPartition(orders.name, 0, until)]).values()
        done.result(timeout=10)

    # offsets 1..2 of partition 0 deleted before the table read them: nothing to read
    orders.produce([(0, 3, "open"), (0, 4, "open")])
    lose(3)
    env.configure(
        metadata_columns=[], on_data_loss="accept", checks=[{**ROW_COUNT, "severity": "warn"}]
    )
    warned = apply(spark, env)
    assert warned.status == "success" and warned.offsets_after == {0: 3, 1: 1}
    assert warned.records_lost == 2 and warned.lost_offsets == {0: (1, 3)}
    assert warned.checks is not None and warned.checks["outcome"] == "warn"
    assert any("row_count" in w and "observed 0 rows" in w for w in warned.warnings)
    assert any("offsets 1..2 (2 records) were deleted" in w for w in warned.warnings)

    # severity error: the table fails on its empty batch, the loss is not recorded
    orders.produce([(0, 5, "open"), (0, 6, "open")])
    lose(5)
    env.configure(metadata_columns=[], on_data_loss="accept", checks=[ROW_COUNT])
    failed = apply(spark, env, expect="error")
    assert "row_count" in (failed.error or "") and "observed 0 rows" in (failed.error or "")
    result = results_of(env)
    assert result["checks"]["outcome"] == "fail"
    assert result["offsets_before"] == {"0": 3, "1": 1} == result["offsets_after"]
    assert any("offsets 3..4 (2 records) were deleted" in w for w in result["warnings"])


def test_an_apply_with_nothing_to_do_writes_fresh_results(
    spark: Any, make_env: Any, orders: Orders
) -> None:
    orders.produce([(0, 1, "open"), (1, 2, "open")])
    env = make_env(orders.name, metadata_columns=[])
    apply(spark, env)
    before = results_of(env)
    assert before["status"] == "success" and before["records_written"] == 2

    status, output = run_cli(env.root, "apply", "--auto-approve")
    assert status == 0, output[-3000:]
    assert "Nothing to apply." in output
    after = results_of(env)
    assert after["run"]["started_at"] > before["run"]["started_at"]
    assert after["status"] == "no_changes" and after["records_written"] == 0
    assert after["run"]["status"] == "success"
