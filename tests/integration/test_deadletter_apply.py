"""on_error skip / dlq through `tableflow plan` + `apply`, with real components.

A poison topic (confluent-kafka's AvroSerializer against the test registry, plus a wrong
magic byte, an unknown schema id and a truncated payload at known offsets) is ingested by
a project table. Every offset must land in exactly one place: the table, the dead-letter
target, or the skipped count; the accounting is in run_results.json and in the snapshot
summary of the published commit. A kill -9 between the dead-letter write and the publish,
then a re-run, leaves no duplicate dead-letter rows and no lost offsets.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.config.loader import load_project
from tableflow_core.deadletter.accounting import ACCOUNTING_KEY, RunAccounting
from tableflow_core.deadletter.sinks.iceberg_driver_append import DRIVER_WRITER, WRITER_PROPERTY
from tableflow_core.deadletter.suspension import SUSPENDED_PROPERTY
from tableflow_core.ingest.bad_records import BAD_RECORD_SCHEMA
from tableflow_core.runner.results import TableResult
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.state.offsets import OFFSETS_KEY
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.plan import PlanTask
from tableflow_core.tasks.run import RunTask
from tests.fixtures.apply_env import Env, apply, run_cli_apply
from tests.fixtures.catalog import start_catalog_server, unique_namespace
from tests.fixtures.dead_letters import read_dead_letters
from tests.fixtures.lake import LAKES, Lake
from tests.fixtures.poison import framing_poison
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.integration.test_cli_basics import tableflow

pytestmark = pytest.mark.slow

SCHEMA = {
    "type": "record",
    "name": "Payment",
    "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
}
LAYOUT = {
    0: ["good", "magic", "good", "truncated", "good", "good"],
    1: ["unknown_id", "good", "good", "magic"],
}
BAD = {(p, o) for p, kinds in LAYOUT.items() for o, kind in enumerate(kinds) if kind != "good"}
GOOD = {(p, o) for p, kinds in LAYOUT.items() for o, kind in enumerate(kinds) if kind == "good"}


def _id(partition: int, offset: int) -> int:
    return partition * 100 + offset


@dataclass(frozen=True)
class Poison:
    topic: str
    values: dict[tuple[int, int], bytes]


def produce_poison(kafka_broker: KafkaBroker, registry_url: str) -> Poison:
    topic = kafka_broker.create_topic(unique_name("poison"), len(LAYOUT))
    serializer = AvroSerializer(RegistrySettings(url=registry_url).client(), json.dumps(SCHEMA))
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    values: dict[tuple[int, int], bytes] = {}
    for partition, kinds in LAYOUT.items():
        for offset, kind in enumerate(kinds):
            i = _id(partition, offset)
            good = serializer(
                {"id": i, "amount": 1.5 * i}, SerializationContext(topic, MessageField.VALUE)
            )
            assert good is not None
            values[(partition, offset)] = framing_poison(kind, good)
            producer.produce(
                topic, values[(partition, offset)], f"k{i}".encode(), partition=partition
            )
    assert producer.flush(10) == 0
    return Poison(topic, values)


@pytest.fixture
def poison(kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer) -> Iterator[Poison]:
    yield produce_poison(kafka_broker, schema_registry.url)


def table_ids(env: Env) -> list[int]:
    return sorted(r["id"] for r in env.pyiceberg_table().scan().to_arrow().to_pylist())


def assert_accounting(env: Env, result: TableResult, outcome: str) -> None:
    """run_results.json and the published snapshot's summary hold the same accounting."""
    on_disk = json.loads((env.root / "target" / "run_results.json").read_text())
    (table,) = on_disk["tables"]
    accounting = table["accounting"]
    assert accounting == result.accounting
    expected = {"read": 10, "written": 6, "filtered": 0, "skipped": 0, "dead_lettered": 0}
    expected[outcome] = 4
    assert {k: accounting["totals"][k] for k in expected} == expected
    assert accounting["totals"]["tombstones"] == 0
    by_partition = {p["partition"]: p for p in accounting["partitions"]}
    for partition, kinds in LAYOUT.items():
        bad = sum(k != "good" for k in kinds)
        assert by_partition[partition]["read"] == len(kinds)
        assert by_partition[partition][outcome] == bad
        assert by_partition[partition]["written"] == len(kinds) - bad
    assert table[f"records_{'dead_lettered' if outcome == 'dead_lettered' else 'skipped'}"] == 4
    assert table["records_written"] == 6
    snapshot = env.pyiceberg_table().current_snapshot()
    assert snapshot is not None
    summary = snapshot.summary.additional_properties
    stored = RunAccounting.from_snapshot_summary(summary, "t")
    assert stored is not None and stored.to_json()["totals"] == accounting["totals"]
    assert stored.run_id == accounting["run_id"]
    assert OFFSETS_KEY in summary  # the same commit carries the offsets
    assert ACCOUNTING_KEY in summary


def test_skip_counts_bad_records_and_commits_past_them(
    spark: Any, make_env: Any, poison: Poison
) -> None:
    env = make_env(poison.topic, metadata_columns=[], on_error="skip")
    result = apply(spark, env)
    assert result.offsets_after == {p: len(k) for p, k in LAYOUT.items()}
    assert table_ids(env) == sorted(_id(p, o) for p, o in GOOD)
    assert_accounting(env, result, "skipped")


def test_skip_with_a_filter_accounts_filtered_rows_apart(
    spark: Any, make_env: Any, poison: Poison
) -> None:
    env = make_env(
        poison.topic,
        metadata_columns=[],
        on_error="skip",
        transforms=[{"type": "filter", "where": "id % 2 = 0"}],
    )
    result = apply(spark, env)
    kept = sorted(_id(p, o) for p, o in GOOD if _id(p, o) % 2 == 0)
    assert table_ids(env) == kept
    accounting = result.accounting
    assert accounting is not None
    totals = {k: accounting["totals"][k] for k in ("read", "written", "filtered", "skipped")}
    assert totals == {"read": 10, "written": len(kept), "filtered": 6 - len(kept), "skipped": 4}
    by_partition = {p["partition"]: p for p in accounting["partitions"]}
    for partition in LAYOUT:
        good = [_id(p, o) for p, o in GOOD if p == partition]
        assert by_partition[partition]["filtered"] == sum(i % 2 for i in good)


def dlq_rows(env: Env, identifier: str) -> list[dict[str, Any]]:
    """The dead-letter table's rows, read by pyiceberg (not the writer)."""
    rows = env.catalog.pyiceberg_catalog().load_table(identifier).scan().to_arrow().to_pylist()
    return sorted(rows, key=lambda r: (r["source_partition"], r["source_offset"]))


def dlq_snapshots(env: Env, identifier: str) -> list[dict[str, str]]:
    """The summaries of the dead-letter table's snapshots that added rows."""
    table = env.catalog.pyiceberg_catalog().load_table(identifier)
    summaries = [s.summary.additional_properties for s in table.metadata.snapshots if s.summary]
    return [s for s in summaries if int(s.get("added-records", 0))]


@LAKES
def test_dlq_iceberg_table_every_offset_once_and_kill_9_before_publish(
    spark: Any, make_env: Any, poison: Poison, lake: Lake
) -> None:
    identifier = f"{unique_namespace('dlq')}.bad_records"
    env = make_env(
        poison.topic,
        metadata_columns=[],
        on_error="dlq",
        dlq={"type": "iceberg", "table": identifier},
    )
    planned = tableflow("plan", cwd=env.root)
    assert planned.returncode == 0, planned.stderr
    assert f"+ dead-letter table {identifier}" in planned.stdout

    # kill -9 after the dead-letter write (the driver's append: 4 rows), before the
    # table's publish.
    run_cli_apply(env, crash_at="after_dead_letter")
    first = dlq_rows(env, identifier)
    assert {(r["source_partition"], r["source_offset"]) for r in first} == BAD
    assert table_ids(env) == []  # nothing published
    assert env.pyiceberg_table().scan().to_arrow().num_rows == 0
    written_by = dlq_snapshots(env, identifier)
    assert [s.get(WRITER_PROPERTY) for s in written_by] == [DRIVER_WRITER]

    result = apply(spark, env)  # the re-run routes the same records again
    rows = dlq_rows(env, identifier)
    assert len(rows) == len(BAD)  # the driver's append added nothing for them
    assert dlq_snapshots(env, identifier) == written_by  # nor committed anything
    assert {r["run_id"] for r in rows} == {r["run_id"] for r in first}  # first run's rows kept
    dead = {(r["source_partition"], r["source_offset"]) for r in rows}
    written = {(i // 100, i % 100) for i in table_ids(env)}
    assert dead.isdisjoint(written) and dead | written == set(poison.values)
    assert len(table_ids(env)) == len(GOOD)
    for r in rows:
        assert r["value"] == poison.values[(r["source_partition"], r["source_offset"])]
        assert r["source_topic"] == poison.topic and r["stage"] == "decode"
    assert result.offsets_after == {p: len(k) for p, k in LAYOUT.items()}
    assert_accounting(env, result, "dead_lettered")
    assert [f.name for f in BAD_RECORD_SCHEMA] == list(rows[0])

    queried = tableflow(
        "query",
        f"SELECT count(*) AS n, count(DISTINCT (source_partition, source_offset)) AS d "
        f"FROM {identifier}",
        cwd=env.root,
    )
    assert queried.returncode == 0, queried.stderr
    assert [int(x) for x in queried.stdout.split("│")[-3:-1]] == [len(BAD), len(BAD)]


def test_dlq_kafka_topic_every_offset_once(
    spark: Any, make_env: Any, poison: Poison, kafka_broker: KafkaBroker
) -> None:
    dlq_topic = kafka_broker.create_topic(unique_name("dlq"), 1)
    env = make_env(
        poison.topic, metadata_columns=[], on_error="dlq", dlq={"type": "kafka", "topic": dlq_topic}
    )
    result = apply(spark, env)
    letters = read_dead_letters(kafka_broker, dlq_topic, len(BAD))
    assert len(letters) == len(BAD)
    dead = set()
    for letter in letters:
        assert letter.value == poison.values[letter.source]
        assert letter.stage == "decode" and letter.source_topic == poison.topic
        dead.add(letter.source)
    written = {(i // 100, i % 100) for i in table_ids(env)}
    assert dead == BAD and written == GOOD
    assert_accounting(env, result, "dead_lettered")


def test_run_suspends_a_failing_table_keeps_the_others_and_apply_resumes_it(
    spark: Any, stack_project: Any, catalog_server: Any, poison: Poison
) -> None:
    namespace = unique_namespace("susp")
    strict = {"name": "strict", "topic": poison.topic, "metadata_columns": []}
    lenient = {**strict, "name": "lenient", "on_error": "skip"}
    root = stack_project(namespace=namespace, tables=[strict, lenient], name="susp")
    project = load_project(root)
    catalog = catalog_server.pyiceberg_catalog()

    (report,) = RunTask(project, project.tables, spark_factory=lambda: spark, once=True).run()
    assert list(report.suspended) == ["strict"] and not report.ok
    assert (
        "topic" in report.suspended["strict"]
        and "partition 0 offset 1" in report.suspended["strict"]
    )
    assert report.results is not None
    by_name = {t.table: t for t in report.results.tables}
    assert by_name["lenient"].status == "success" and by_name["lenient"].records_skipped == 4
    assert catalog.load_table(f"{namespace}.lenient").scan().to_arrow().num_rows == len(GOOD)
    strict_table = catalog.load_table(f"{namespace}.strict")
    assert SUSPENDED_PROPERTY in strict_table.properties
    assert strict_table.scan().to_arrow().num_rows == 0

    planned = tableflow("plan", cwd=root)
    assert planned.returncode == 0, planned.stderr
    assert "! strict: suspended since" in planned.stdout
    assert "partition 0 offset 1" in planned.stdout

    # The next cycle skips the suspended table (nothing applied for it).
    (again,) = RunTask(project, project.tables, spark_factory=lambda: spark, once=True).run()
    assert list(again.suspended) == ["strict"]
    assert again.results is None or "strict" not in {t.table for t in again.results.tables}

    # Fixed (here: skip the bad records): a successful apply clears the suspension.
    stack_project(
        namespace=namespace, tables=[{**strict, "on_error": "skip"}, lenient], name="susp"
    )
    project = load_project(root)
    plan = PlanTask(project, project.tables).run()
    assert "strict" in plan.suspended and not plan.blockers
    results = ApplyTask(project, plan, spark=spark).run()
    assert results.status == "success", results
    strict_table = catalog.load_table(f"{namespace}.strict")
    assert SUSPENDED_PROPERTY not in strict_table.properties
    assert strict_table.scan().to_arrow().num_rows == len(GOOD)
    assert PlanTask(project, project.tables).run().suspended == {}


def test_catalog_stopped_mid_run_is_named_with_its_address(
    spark: Any, make_env: Any, poison: Poison, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    from tableflow_core.engine import ddl
    from tableflow_core.engine.spark_session import register_catalog
    from tableflow_core.kafka.offsets import OffsetRange
    from tableflow_core.pipeline.run import IngestError, ingest
    from tableflow_core.sql_text import quote_ident

    env = make_env(poison.topic, metadata_columns=[], on_error="skip")
    server = start_catalog_server(tmp_path / "own-catalog")
    name = f"tf_gone_{uuid.uuid4().hex[:8]}"
    handle = SimpleNamespace(catalog=server.pyiceberg_catalog(), address=server.uri)
    try:
        register_catalog(spark, name, server.spark_properties())
        spec = env.spec().bind(catalog=name)
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote_ident(name)}.{env.namespace}")
        ddl.create_table(spark, spec.identifier, spec.decoded_schema, properties=spec.properties)
    finally:
        server.process.stop()
    with pytest.raises(IngestError) as info:
        ingest(
            spark,
            spec,
            [OffsetRange(poison.topic, 0, 0, len(LAYOUT[0]))],
            {"bootstrap.servers": kafka_broker.bootstrap},
            {},
            catalog=handle,
        )
    message = str(info.value)
    assert f"catalog '{name}' at {server.uri}" in message, message
    assert "An error occurred while calling" not in message, message
    assert "Connection refused" in message or "ConnectException" in message, message
