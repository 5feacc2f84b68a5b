"""What a real broker brings, through `tableflow plan` and `apply` on Apache Kafka 4.4, each
checked against an independent model of what should land (docs/plan-and-apply.md):

- transactions: read_committed, planned to the last stable offset, exact offsets
  committed across control and aborted records, an open transaction never half-read, and
  a range ending at the LSO never waits for a record at end - 1;
- retention: records deleted before the table read them are shown by plan, fail apply by
  default (topic, partition, offsets named), and are accepted, recorded, with
  `on_data_loss: accept`;
- partitions added to the topic are read from their start;
- a compacted topic as an upsert table's source: older offsets and then tombstones gone,
  the table's state stays the model's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import NewPartitions, OffsetSpec

from tableflow_core.cli.main import cli
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.kafka.range_reader import KafkaReadError, read_range
from tableflow_core.plan.actions import Ingest, LostOffsets
from tableflow_core.state.offsets import LOST_OFFSETS_KEY
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.apply_env import Env, apply, run_cli_apply
from tests.fixtures.kafka_server import ApacheKafka, read_partition
from tests.fixtures.stack import unique_name

pytestmark = pytest.mark.slow

JSON_VALUE = {
    "format": "json",
    "columns": [{"name": "id", "type": "long"}, {"name": "v", "type": "string"}],
}


def _value(record_id: int) -> str:
    return json.dumps({"id": record_id, "v": f"v{record_id}"})


def _offsets(kafka: ApacheKafka, topic: str, partitions: int, level: IsolationLevel) -> dict:
    admin = kafka.admin()
    wanted = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    found = admin.list_offsets(wanted, isolation_level=level)
    return {tp.partition: int(f.result(timeout=10).offset) for tp, f in found.items()}


def _ids(env: Env) -> list[int]:
    return sorted(env.pyiceberg_table().scan(selected_fields=("id",)).to_arrow()["id"].to_pylist())


def _plan_ingest(env: Env) -> Ingest:
    project = env.project
    plan = PlanTask(project, project.tables).run()
    (ingest,) = [a for a in plan.actions if isinstance(a, Ingest)]
    return ingest


def _plan_text(env: Env) -> str:
    result = CliRunner().invoke(cli, ["--project-dir", str(env.root), "plan"])
    assert result.exit_code == 0, result.output
    return result.output


def test_transactions_read_committed_to_the_last_stable_offset(
    kafka_broker: ApacheKafka, make_env: Any, spark: Any
) -> None:
    topic = kafka_broker.create_topic(unique_name("txn"), partitions=2)
    producer = Producer(
        kafka_broker.client_config(
            # The open transaction must outlive the test on a loaded machine: librdkafka's
            # default (60 s) let the broker abort it before the last plan looked.
            **{"transactional.id": f"tx-{topic}", "linger.ms": 0, "transaction.timeout.ms": 900_000}
        )
    )
    producer.init_transactions(30)
    committed: list[int] = []

    def transaction(ids: Iterable[int], end: str) -> None:
        producer.begin_transaction()
        for record_id in ids:
            producer.produce(
                topic, key=str(record_id), value=_value(record_id), partition=record_id % 2
            )
        producer.flush(10)
        if end == "commit":
            producer.commit_transaction(30)
            committed.extend(ids)
        elif end == "abort":
            producer.abort_transaction(30)

    transaction(range(0, 6), "commit")
    transaction(range(6, 10), "abort")
    transaction(range(10, 16), "commit")
    transaction(range(16, 18), "abort")
    transaction(range(18, 22), "open")  # produced, flushed, neither committed nor aborted

    stable = _offsets(kafka_broker, topic, 2, IsolationLevel.READ_COMMITTED)
    high = _offsets(kafka_broker, topic, 2, IsolationLevel.READ_UNCOMMITTED)
    assert all(stable[p] < high[p] for p in (0, 1))  # the open transaction is above the LSO

    env = make_env(topic, value=JSON_VALUE, metadata_columns=["partition", "offset"])
    ingest = _plan_ingest(env)
    assert {p.partition: p.read_to for p in ingest.partitions} == stable
    assert {p.partition: p.high_watermark for p in ingest.partitions} == stable

    # A range ending at the LSO ends on the consumer's position, not on a record at
    # LSO - 1 (a control record there): with a 5 s idle limit, waiting would fail.
    conf = kafka_broker.client_config()
    for partition, end in stable.items():
        started = time.monotonic()
        chunks = list(read_range(conf, OffsetRange(topic, partition, 0, end), idle_timeout_s=5))
        assert time.monotonic() - started < 5
        read = sorted(json.loads(v)["id"] for c in chunks for v in c.values)
        assert read == sorted(i for i in committed if i % 2 == partition)

    result = apply(spark, env)
    assert result.offsets_after == stable  # past control and aborted records, to the LSO
    assert _ids(env) == sorted(committed)
    assert result.records_written == len(committed)

    # Nothing is pending while the transaction stays open.
    project = env.project
    assert not [a for a in PlanTask(project, project.tables).run().actions if a.kind == "ingest"]

    producer.commit_transaction(30)
    committed.extend(range(18, 22))
    now = kafka_broker.stable_offsets(topic, 2)  # once the commit's markers are written
    assert all(now[p] > stable[p] for p in (0, 1))
    second = apply(spark, env)
    assert second.offsets_after == now and second.records_written == 4
    assert _ids(env) == sorted(committed)  # every committed record once, no aborted one


def test_records_deleted_before_they_were_read_fail_apply_or_are_accepted_and_recorded(
    kafka_broker: ApacheKafka, make_env: Any, spark: Any
) -> None:
    topic = kafka_broker.create_topic(unique_name("retention"))
    producer = Producer(kafka_broker.client_config(**{"linger.ms": 0}))

    def produce(ids: Iterable[int]) -> None:
        for record_id in ids:
            producer.produce(topic, key=str(record_id), value=_value(record_id))
        assert producer.flush(10) == 0

    def delete_below(offset: int) -> None:
        admin = kafka_broker.admin()
        futures = admin.delete_records([TopicPartition(topic, 0, offset)])
        assert next(iter(futures.values())).result(timeout=10).low_watermark == offset

    produce(range(10))
    env = make_env(topic, value=JSON_VALUE, metadata_columns=["offset"])
    assert apply(spark, env).offsets_after == {0: 10}
    produce(range(10, 20))
    delete_below(15)  # offsets 10-14 go before the table read them (as retention would)

    ingest = _plan_ingest(env)
    assert ingest.lost == (LostOffsets(partition=0, start=10, end=15),)
    assert [(r.start, r.end) for r in ingest.ranges] == [(15, 20)]
    text = _plan_text(env)
    assert f"records lost: topic '{topic}' partition 0: offsets 10..14 (5 records)" in text
    assert "apply fails unless the table sets `on_data_loss: accept`" in text

    failed = apply(spark, env, expect="error")
    assert failed.error is not None
    assert f"topic '{topic}' partition 0: offsets 10..14 (5 records)" in failed.error
    assert "on_data_loss: accept" in failed.error
    assert _ids(env) == list(range(10))  # nothing read, nothing committed

    env.configure(value=JSON_VALUE, metadata_columns=["offset"], on_data_loss="accept")
    assert "apply reads on from the log start and records the loss" in _plan_text(env)
    output = run_cli_apply(env, crash_at=None)  # as users run it: the warning on the console
    assert f"warning: topic '{topic}' partition 0: offsets 10..14 (5 records) were" in output
    results = json.loads((env.root / "target" / "run_results.json").read_text())
    (table,) = results["tables"]
    assert table["records_lost"] == 5 and table["lost_offsets"] == {"0": [10, 15]}
    assert table["offsets_after"] == {"0": 20}
    assert _ids(env) == [*range(10), *range(15, 20)]
    summary = env.pyiceberg_table().current_snapshot().summary
    assert json.loads(summary[LOST_OFFSETS_KEY]) == {"topic": topic, "lost": {"0": [10, 15]}}

    # Every record due gone: no range to read, the loss is still shown and, accepted,
    # the offsets move past it in a commit of their own.
    produce(range(20, 25))
    delete_below(25)
    ingest = _plan_ingest(env)
    assert ingest.ranges == () and ingest.lost == (LostOffsets(partition=0, start=20, end=25),)
    accepted = apply(spark, env)
    assert accepted.offsets_after == {0: 25} and accepted.records_lost == 5
    assert _ids(env) == [*range(10), *range(15, 20)]
    project = env.project
    assert not [a for a in PlanTask(project, project.tables).run().actions if a.kind == "ingest"]


def test_records_deleted_between_plan_and_apply_fail_the_read_never_skip(
    kafka_broker: ApacheKafka,
) -> None:
    # The plan saw offsets 0-9; retention then took 0-5 before apply read them. The
    # reader asks with auto.offset.reset=error: it fails naming the range, never jumps.
    topic = kafka_broker.create_topic(unique_name("race"))
    producer = Producer(kafka_broker.client_config(**{"linger.ms": 0}))
    for record_id in range(10):
        producer.produce(topic, key=str(record_id), value=_value(record_id))
    assert producer.flush(10) == 0
    admin = kafka_broker.admin()
    (deleted,) = admin.delete_records([TopicPartition(topic, 0, 6)]).values()
    assert deleted.result(timeout=10).low_watermark == 6
    conf = kafka_broker.client_config()
    with pytest.raises(KafkaReadError) as info:
        list(read_range(conf, OffsetRange(topic, 0, 0, 10), idle_timeout_s=10))
    message = str(info.value)
    assert f"topic {topic!r} partition 0 range [0, 10)" in message
    assert "Offset out of range" in message


def test_partitions_added_to_the_topic_are_read_from_their_start(
    kafka_broker: ApacheKafka, make_env: Any, spark: Any
) -> None:
    topic = kafka_broker.create_topic(unique_name("grow"), partitions=1)
    producer = Producer(kafka_broker.client_config(**{"linger.ms": 0}))
    for record_id in range(5):
        producer.produce(topic, key=str(record_id), value=_value(record_id), partition=0)
    producer.flush(10)
    env = make_env(topic, value=JSON_VALUE, metadata_columns=["partition", "offset"])
    assert apply(spark, env).offsets_after == {0: 5}

    admin = kafka_broker.admin()
    grown = admin.create_partitions([NewPartitions(topic, 3)])
    grown[topic].result(timeout=30)
    # The controller answers before every broker's metadata has the new partitions: a
    # producer that saw one partition fails records sent to the others ("Unknown
    # partition") and flush() still returns 0. Wait until they are there; check delivery.
    deadline = time.monotonic() + 30
    while len(admin.list_topics(topic, timeout=10).topics[topic].partitions) < 3:
        assert time.monotonic() < deadline, f"{topic}: the broker never showed 3 partitions"
        time.sleep(0.1)
    fresh = Producer(kafka_broker.client_config(**{"linger.ms": 0}))
    failed: list[str] = []
    for record_id in range(5, 14):
        fresh.produce(
            topic,
            key=str(record_id),
            value=_value(record_id),
            partition=record_id % 3,
            on_delivery=lambda error, _msg: failed.append(str(error)) if error else None,
        )
    assert fresh.flush(10) == 0 and failed == []
    # start_from only decides a table's first run: a new partition is read from offset 0
    # even when the table now says `latest`.
    env.configure(value=JSON_VALUE, metadata_columns=["partition", "offset"], start_from="latest")
    ingest = _plan_ingest(env)
    starts = {p.partition: (p.committed, p.start, p.read_to) for p in ingest.partitions}
    assert starts == {0: (5, 5, 8), 1: (None, 0, 3), 2: (None, 0, 3)}
    result = apply(spark, env)
    assert result.offsets_after == {0: 8, 1: 3, 2: 3}
    assert _ids(env) == list(range(14))


FAST_COMPACTION = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "3000",
    "file.delete.delay.ms": "100",
}


def test_a_compacted_topic_feeds_an_upsert_table_exactly(
    kafka_broker: ApacheKafka, make_env: Any, spark: Any
) -> None:
    topic = kafka_broker.create_topic(unique_name("compact"), config=FAST_COMPACTION)
    producer = Producer(kafka_broker.client_config(**{"linger.ms": 0}))
    model: dict[str, str] = {}  # the latest value per key; a tombstone deletes

    def produce(pairs: Iterable[tuple[str, str | None]], pause: float = 0.0) -> None:
        for key, value in pairs:
            producer.produce(topic, key=key, value=value)
            producer.flush(10)
            if value is None:
                model.pop(key, None)
            else:
                model[key] = json.loads(value)["v"]
            time.sleep(pause)  # lets segments roll (the active one is never cleaned)

    def version(key: int, round_: int) -> tuple[str, str]:
        return f"k{key}", json.dumps({"id": key, "v": f"k{key}-r{round_}"})

    def on_the_broker() -> list[tuple[int, str, str | None]]:
        read = read_partition(kafka_broker.consumer_config(), topic, 0, 0)
        assert read.errors == []
        return [(o, k.decode(), v.decode() if v else None) for o, k, v in read.records]

    def table_state(env: Env) -> dict[str, str]:
        rows = env.pyiceberg_table().scan(selected_fields=("key", "v")).to_arrow().to_pylist()
        assert len(rows) == len({r["key"] for r in rows})
        return {r["key"]: r["v"] for r in rows}

    upsert = {
        "value": JSON_VALUE,
        "key": {"format": "string"},
        "mode": "upsert",
        "key_columns": ["key"],
        "metadata_columns": [],
    }
    produce([version(k, 1) for k in range(6)])
    produce([version(k, 2) for k in range(3)], pause=0.15)
    produce([("k5", None)], pause=0.15)  # tombstone
    first = make_env(topic, **upsert)
    apply(spark, first)
    assert table_state(first) == model

    # More updates and deletes, then wait until the cleaner removed superseded offsets,
    # some of which the table has not read yet: its next range has gaps.
    produce([version(k, 3) for k in (0, 1, 3)], pause=0.15)
    produce([("k2", None), ("k4", None)], pause=0.15)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        produce([("roll", json.dumps({"id": -1, "v": "roll"}))], pause=0.3)
        keys = [k for _, k, _ in on_the_broker()]
        if keys.count("k0") == 1 and keys.count("k1") == 1 and "k3" in keys:
            break
    else:
        pytest.fail(f"compaction did not run: {on_the_broker()}")
    apply(spark, first)
    assert table_state(first) == model

    # Tombstones go `delete.retention.ms` after the cleaning that kept them: a table
    # made now never sees the deleted keys at all, and still ends at the model's state.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        produce([("roll", json.dumps({"id": -1, "v": "roll"}))], pause=0.3)
        if all(value is not None for _, _, value in on_the_broker()):
            break
    else:
        pytest.fail(f"the tombstones stayed: {on_the_broker()}")
    assert sorted({k for _, k, _ in on_the_broker()}) == sorted(model)
    second = make_env(topic, **upsert)
    apply(spark, second)
    assert table_state(second) == model
    apply(spark, first)
    assert table_state(first) == model
