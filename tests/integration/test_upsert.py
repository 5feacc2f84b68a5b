"""Upsert tables end to end: real broker, registry, catalog server and Spark, through
plan + apply; read back by pyiceberg, Spark and DuckDB (`tableflow query`'s reader).

Records are produced to explicit partitions so one key can appear in several.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Producer

from tests.fixtures.apply_env import apply, apply_ddl_only, run_cli_apply
from tests.fixtures.dead_letters import read_dead_letters
from tests.fixtures.stack import KafkaBroker, unique_name
from tests.unit.test_engine_helpers import avro_schema, frame, register

pytestmark = pytest.mark.slow


def key_schema(field: str) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "PaymentKey",
        "namespace": "tableflow.test",
        "fields": [{"name": field, "type": "long"}],
    }


# (partition, key, value or None for a tombstone); value = (name, amount) or with country
Record = tuple[int, Any, Any]


class Topic:
    """A keyed topic: Avro record keys {id} (`avro`), Avro keys {key_id}, a field the
    value lacks (`avro-key-field`), or UTF-8 string keys (`string`)."""

    def __init__(self, broker: KafkaBroker, registry_url: str, key_format: str) -> None:
        self.name = broker.create_topic(unique_name(f"upsert-{key_format}"), 2)
        self.bootstrap = broker.bootstrap
        self.registry_url = registry_url
        self.key_format = key_format
        self.key_field = "key_id" if key_format == "avro-key-field" else "id"
        self.key_schema = key_schema(self.key_field)
        self._key_id = (
            register(registry_url, f"{self.name}-key", self.key_schema)
            if key_format.startswith("avro")
            else 0
        )

    def produce(self, records: list[Record], version: int = 1) -> None:
        schema = avro_schema(version)
        value_id = register(self.registry_url, f"{self.name}-value", schema)
        parsed_value = fastavro.parse_schema(schema)
        parsed_key = fastavro.parse_schema(self.key_schema)
        producer = Producer({"bootstrap.servers": self.bootstrap})
        for partition, key, value in records:
            if self.key_format.startswith("avro"):
                key_bytes = frame(self._key_id, parsed_key, {self.key_field: key})
            else:
                key_bytes = f"k{key}".encode()
            payload = None
            if value is not None:
                record = {"id": key, "name": value[0], "amount": float(value[1])}
                if version >= 2:
                    record["country"] = value[2] if len(value) > 2 else None
                payload = frame(value_id, parsed_value, record)
            producer.produce(self.name, payload, key=key_bytes, partition=partition)
        producer.flush(30)


@pytest.fixture
def topic(kafka_broker: KafkaBroker, schema_registry: Any) -> Topic:
    """A topic with Avro keys."""
    return Topic(kafka_broker, schema_registry.url, "avro")


def table_config(topic: Topic) -> dict[str, Any]:
    if topic.key_format.startswith("avro"):
        # `key_id` is not a value field: the column comes from the key's registry schema
        return {"mode": "upsert", "key_columns": [topic.key_field], "key": {"format": "avro"}}
    # a string key absent from the value: one column, filled from the key
    return {"mode": "upsert", "key_columns": ["order_key"], "key": {"format": "string"}}


def rows_by_reader(env: Any, spark: Any, key: str) -> dict[Any, tuple[Any, ...]]:
    """{key: (id, name, amount)} read by pyiceberg; Spark and DuckDB must agree."""
    from tableflow_core.readers.duckdb_reader import attach_rest_catalog, duckdb_connection
    from tableflow_core.targets.catalog import open_catalog

    table = env.pyiceberg_table()
    by_pyiceberg = {
        r[key]: (r["id"], r["name"], r["amount"]) for r in table.scan().to_arrow().to_pylist()
    }
    assert len(by_pyiceberg) == table.scan().to_arrow().num_rows  # one row per key
    spec = env.spec()
    by_spark = {
        r[key]: (r["id"], r["name"], r["amount"]) for r in spark.table(spec.identifier).collect()
    }
    assert by_spark == by_pyiceberg
    project = env.project
    with open_catalog(project) as handle:
        props = handle.spark_properties
        con = duckdb_connection()
        attach_rest_catalog(con, handle.spark_name, props["uri"], props.get("credential"))
        duck = con.sql(
            f'SELECT "{key}", id, name, amount FROM {handle.spark_name}.{env.namespace}.t'
        ).fetchall()
    assert {r[0]: tuple(r[1:]) for r in duck} == by_pyiceberg
    assert len(duck) == len(by_pyiceberg)
    return by_pyiceberg


def expect(topic: Topic, rows: dict[int, tuple[str, float]]) -> dict[Any, tuple[Any, ...]]:
    key = (lambda i: i) if topic.key_format.startswith("avro") else (lambda i: f"k{i}")
    return {key(i): (i, name, float(amount)) for i, (name, amount) in rows.items()}


RUN_1: list[Record] = [
    (0, 1, ("a", 1)),
    (0, 2, ("b", 2)),
    (0, 1, ("a2", 11)),  # same key again in the batch: the later offset wins
    (0, 3, ("c", 3)),
    (0, 3, None),  # tombstone for a key inserted in the same batch
    (0, 3, ("c2", 33)),  # record after a tombstone re-inserts
    (0, 99, None),  # tombstone for a key never seen: no-op
    (1, 4, ("d", 4)),
    (1, 1, ("z", 111)),  # key 1 in partition 1 too: (partition, offset) order -> wins
]
AFTER_1 = {1: ("z", 111), 2: ("b", 2), 3: ("c2", 33), 4: ("d", 4)}
RUN_2: list[Record] = [
    (0, 2, None),  # tombstone for a present key: deleted
    (0, 5, ("e", 5)),
    (0, 77, None),  # absent key: no-op
    (1, 4, ("d2", 44)),
    (1, 4, ("d3", 444)),
]
AFTER_2 = {1: ("z", 111), 3: ("c2", 33), 4: ("d3", 444), 5: ("e", 5)}


@pytest.fixture(autouse=True)
def no_reader_process_left() -> Iterator[None]:
    """A reader process a test started (`driver-process`) ends with the test."""
    from tableflow_core.engine import reader_process

    yield
    reader_process.stop_reader_process()


def use_writer(monkeypatch: pytest.MonkeyPatch, writer: str) -> None:
    """`driver`: a small batch's records merged on the driver (pipeline/upsert_rows.py),
    the default, its records read in the driver process; `driver-tasks`: the same, its
    records read by Spark tasks, as a batch over `DRIVER_READ_MAX_RECORDS` is;
    `driver-process`: the driver reads one partition and its reader process the other
    (engine/reader_process.py), as in a batch of more than MIN_RECORDS_PER_TASK; `spark`:
    Spark's MERGE, as a table that needs Spark's writer runs."""
    import tableflow_core.plan.dag as dag
    from tableflow_core.engine import reader_process
    from tableflow_core.pipeline import shared_run
    from tableflow_core.pipeline.runners import read_ranges

    if writer == "driver-process":
        monkeypatch.setattr(read_ranges, "MIN_RECORDS_PER_TASK", 1)  # a group per partition
        process = reader_process.start_reader_process()
        assert process is not None and process.wait_ready(120)
    if writer == "spark":
        monkeypatch.setattr(dag, "needs_spark_writer", lambda _spec: "the test keeps Spark's MERGE")
    if writer == "driver-tasks":
        monkeypatch.setattr(shared_run, "DRIVER_READ_MAX_RECORDS", 0)


def reader_requests() -> int:
    """The requests the driver's reader process took so far (0: none runs)."""
    from tableflow_core.engine import reader_process

    process = reader_process.current()
    return 0 if process is None else process.requests


def spark_jobs(spark: Any) -> int:
    """The Spark jobs the application ran so far (its status store: what the UI shows)."""
    return int(spark.sparkContext._jsc.sc().statusStore().jobsList(None).size())


# What each writer times (run_results.json) and the table commits of a run after the
# first: Spark's branch, append of the batch's new keys, MERGE, publish; the driver's one
# publish (data and position delete files, offsets and accounting in one snapshot).
WRITER_TIMINGS = {
    "spark": {"load", "start_run", "decode", "write", "merge", "publish", "publish_commit"},
    "driver": {"load", "start_run", "shared_job", "merge", "publish_commit"},
}
WRITER_TIMINGS["driver-tasks"] = WRITER_TIMINGS["driver-process"] = WRITER_TIMINGS["driver"]
WRITER_COMMITS = {"spark": 4, "driver": 1, "driver-tasks": 1, "driver-process": 1}


@pytest.mark.parametrize(
    ("key_format", "lake", "writer"),
    [
        ("avro", "file", "spark"),
        ("avro", "file", "driver"),
        ("avro", "file", "driver-tasks"),
        ("avro", "file", "driver-process"),
        ("string", "file", "driver"),
        ("avro-key-field", "file", "driver"),
        ("avro", "s3", "driver"),
        ("string", "s3", "spark"),
    ],
    indirect=["lake"],
)
def test_upsert_last_record_per_key_wins_tombstones_delete(
    spark: Any,
    make_env: Any,
    kafka_broker: KafkaBroker,
    schema_registry: Any,
    monkeypatch: pytest.MonkeyPatch,
    key_format: str,
    writer: str,
) -> None:
    use_writer(monkeypatch, writer)
    served = reader_requests()
    topic = Topic(kafka_broker, schema_registry.url, key_format)
    env = make_env(topic.name, metadata_columns=[], **table_config(topic))
    key = {"avro": "id", "string": "order_key", "avro-key-field": "key_id"}[key_format]
    topic.produce(RUN_1)
    first = apply(spark, env)
    assert first.records_read == len(RUN_1) and first.offsets_after == {0: 7, 1: 2}
    assert first.records_written == 7  # and 2 tombstones: deletes, not null values
    assert not [w for w in first.warnings if "null-value" in w], first.warnings
    timings = first.timings or {}
    assert WRITER_TIMINGS[writer] <= set(timings), timings
    assert timings["merge"] > 0 and timings["publish_commit"] > 0
    if writer == "spark":  # the MERGE is timed inside the write stage
        assert timings["merge"] <= timings["write"]
    assert rows_by_reader(env, spark, key) == expect(topic, AFTER_1)

    topic.produce(RUN_2)
    commits = len(env.pyiceberg_table().metadata.metadata_log)
    jobs = spark_jobs(spark)
    apply(spark, env)
    # A small batch merged on the driver is read there too: no Spark job at all.
    read_in_driver = writer in ("driver", "driver-process")
    assert (spark_jobs(spark) == jobs) == read_in_driver, (writer, jobs)
    assert rows_by_reader(env, spark, key) == expect(topic, AFTER_2)
    table = env.pyiceberg_table()
    assert len(table.metadata.metadata_log) - commits == WRITER_COMMITS[writer]
    head = table.metadata.snapshot_by_id(table.metadata.current_snapshot_id)
    assert head is not None and json.loads(head.summary["tableflow.offsets"])["offsets"] == {
        "0": 10,
        "1": 4,
    }
    # merge-on-read: position delete files, and readers applied them
    deletes = spark.sql(f"SELECT count(*) FROM {env.spec().identifier}.delete_files").collect()[0][
        0
    ]
    assert deletes >= 1

    # schema evolution on an upsert table; re-insert of the key deleted in run 2
    topic.produce([(0, 2, ("b2", 22, "fr")), (1, 5, ("e2", 55, "de"))], version=2)
    evolved = apply(spark, env)
    assert any(d.startswith("evolve_schema") for d in evolved.ddl)
    after_3 = {**AFTER_2, 2: ("b2", 22), 5: ("e2", 55)}
    assert rows_by_reader(env, spark, key) == expect(topic, after_3)
    countries = {r["id"]: r["country"] for r in env.pyiceberg_table().scan().to_arrow().to_pylist()}
    assert countries == {1: None, 2: "fr", 3: None, 4: None, 5: "de"}
    assert apply(spark, env).status == "no_changes"
    if writer == "driver-process":  # runs 2 and 3 (run 1, a first load, is Spark's tasks')
        assert reader_requests() - served == 2


def test_an_upsert_table_too_large_for_the_driver_runs_spark_merge(
    spark: Any, make_env: Any, monkeypatch: pytest.MonkeyPatch, topic: Topic
) -> None:
    """Planned into a shared job, a table over the driver's size runs Spark's MERGE on its
    own once apply sees its rows (no warning: the way such a table always runs)."""
    from tableflow_core.pipeline import shared_run

    env = make_env(topic.name, metadata_columns=[], **table_config(topic))
    topic.produce(RUN_1)
    first = apply(spark, env)
    assert "shared_job" in (first.timings or {})
    monkeypatch.setattr(shared_run, "DRIVER_MERGE_MAX_ROWS", 3)  # the table holds 4 rows
    topic.produce(RUN_2)
    second = apply(spark, env)
    assert "shared_job" not in (second.timings or {}) and "merge" in (second.timings or {})
    assert second.warnings == ()
    assert rows_by_reader(env, spark, "id") == expect(topic, AFTER_2)


@pytest.mark.parametrize("writer", ["spark", "driver"])
def test_upsert_sigkill_between_merge_and_publish_then_rerun(
    spark: Any, make_env: Any, writer: str, topic: Topic
) -> None:
    config = table_config(topic)
    if writer == "spark":  # a table sorted by its key needs Spark's writer: Spark's MERGE
        config["sort_by"] = ["id"]
    env = make_env(topic.name, metadata_columns=[], **config)
    topic.produce(RUN_1)
    apply(spark, env)
    topic.produce(RUN_2)
    # the MERGE done (Spark: on the run's branch; the driver: data and delete files
    # written, the tombstones remembered in the deletes table), then kill -9
    points = ("after_merge", "before_commit")
    if writer == "driver":
        points = ("shared_mid_write", *points)
    for point in points:
        run_cli_apply(env, crash_at=point)
        assert rows_by_reader(env, spark, "id") == expect(topic, AFTER_1)
    rerun = apply(spark, env)
    assert rerun.offsets_after == {0: 10, 1: 4}
    assert rows_by_reader(env, spark, "id") == expect(topic, AFTER_2)
    refs = spark.sql(f"SELECT name FROM {env.spec().identifier}.refs").collect()
    assert [r.name for r in refs if r.name != "main"] == []


def test_a_first_load_killed_at_each_point_then_rerun_is_exact(
    spark: Any, make_env: Any, topic: Topic
) -> None:
    """A first load (the read tasks write each key's latest record; the driver deletes the
    rows superseded across tasks and remembers the tombstones: pipeline/first_load.py)
    killed with its files written, after the driver's reduction and its deletes table's
    commit, and just before the publish: the table stays empty each time, and the re-run
    gives every reader the model's rows, with no run branch left."""
    env = make_env(topic.name, metadata_columns=[], **table_config(topic))
    topic.produce(RUN_1)
    for point in ("shared_mid_write", "after_merge", "before_commit"):
        run_cli_apply(env, crash_at=point)
        assert env.pyiceberg_table().scan().to_arrow().num_rows == 0, point
    rerun = apply(spark, env)
    assert "shared_job" in (rerun.timings or {}) and "index_advance" in (rerun.timings or {})
    assert rows_by_reader(env, spark, "id") == expect(topic, AFTER_1)
    refs = spark.sql(f"SELECT name FROM {env.spec().identifier}.refs").collect()
    assert [r.name for r in refs if r.name != "main"] == []


def test_upsert_key_problems_are_bad_records(
    spark: Any, make_env: Any, kafka_broker: KafkaBroker, topic: Topic
) -> None:
    env = make_env(topic.name, metadata_columns=[], **table_config(topic))
    topic.produce([(0, 1, ("a", 1))])
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    producer.produce(topic.name, b"\x00\x00\x00\x00\x01x", key=None, partition=0)
    producer.flush(30)
    apply_ddl_only(spark, env)
    failed = apply(spark, env, expect="error")
    assert f"topic {topic.name!r} partition 0 offset 1" in (failed.error or "")
    assert "needs a key" in (failed.error or "")
    assert env.pyiceberg_table().scan().to_arrow().num_rows == 0
    assert json.dumps(failed.offsets_after) == "{}"


STRING_ID_KEY = {
    "type": "record",
    "name": "PaymentKey",
    "namespace": "tableflow.test",
    "fields": [{"name": "id", "type": "string"}],
}


@pytest.mark.parametrize("key_format", ["avro", "string"])
def test_upsert_key_that_does_not_fit_the_key_column_is_a_bad_record(
    spark: Any, make_env: Any, kafka_broker: KafkaBroker, schema_registry: Any, key_format: str
) -> None:
    """The key column `id` is the value's long; the key carries it as text. A key that
    reads as a number fills the column (tombstones find their row by it); one that does
    not is a bad record routed by on_error, named by topic/partition/offset, never a
    failed Spark task."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    name = kafka_broker.create_topic(unique_name(f"upsert-keyfit-{key_format}"), 1)
    client = SchemaRegistryClient({"url": schema_registry.url})
    values = AvroSerializer(client, json.dumps(avro_schema()))
    keys = AvroSerializer(client, json.dumps(STRING_ID_KEY))

    def produce(records: list[tuple[str, int | None, str | None]]) -> None:
        producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
        for key, value_id, label in records:
            key_bytes = (
                keys({"id": key}, SerializationContext(name, MessageField.KEY))
                if key_format == "avro"
                else key.encode()
            )
            value = None
            if label is not None:
                record = {"id": value_id, "name": label, "amount": 1.0}
                value = values(record, SerializationContext(name, MessageField.VALUE))
            producer.produce(name, value, key=key_bytes, partition=0)
        producer.flush(30)

    config = {"mode": "upsert", "key_columns": ["id"], "key": {"format": key_format}}
    env = make_env(name, metadata_columns=[], **config)
    produce(
        [
            ("1", 1, "a"),
            ("2", 2, "b"),
            ("x9", 9, "bad"),  # offset 2: not a long
            ("99999999999999999999", 3, "big"),  # offset 3: overflows a long
            ("2", None, None),  # a tombstone found by its key's value
            ("3", 3, "c"),
        ]
    )
    failed = apply(spark, env, expect="error")
    assert f"topic {name!r} partition 0 offset 2" in (failed.error or "")
    assert "'x9' does not fit key column 'id'" in (failed.error or "")
    assert env.pyiceberg_table().scan().to_arrow().num_rows == 0

    dlq_topic = kafka_broker.create_topic(unique_name("dlq-key"), 1)
    env.configure(metadata_columns=[], on_error="dlq", dlq={"type": "kafka", "topic": dlq_topic},
                  **config)  # fmt: skip
    result = apply(spark, env)
    assert result.records_read == 6 and result.offsets_after == {0: 6}
    landed = {r["id"]: r["name"] for r in env.pyiceberg_table().scan().to_arrow().to_pylist()}
    assert landed == {1: "a", 3: "c"}
    dead = read_dead_letters(kafka_broker, dlq_topic, 2)
    assert [d.source for d in dead] == [(0, 2), (0, 3)]
    for d in dead:
        assert d.source_topic == name and d.stage == "decode"
        assert "does not fit key column 'id' (int64)" in d.error_message


def test_a_saved_plan_goes_stale_when_the_key_subject_gets_a_new_version(
    tmp_path: Any, spark: Any, make_env: Any, schema_registry: Any, topic: Topic
) -> None:
    from pyiceberg.exceptions import NoSuchTableError

    from tableflow_core.plan.plan_file import StalePlanError, load_plan, save_plan
    from tableflow_core.tasks.apply import ApplyTask
    from tableflow_core.tasks.plan import PlanTask

    env = make_env(topic.name, metadata_columns=[], **table_config(topic))
    topic.produce([(0, 1, ("a", 1)), (1, 2, ("b", 2))])
    project = env.project
    plan = PlanTask(project, project.tables).run()
    (seen,) = plan.fingerprints
    assert (seen.key_registry_subject, seen.key_registry_version) == (f"{topic.name}-key", 1)
    saved = tmp_path / "plan.json"
    save_plan(plan, saved)

    # the key subject moves on (a compatible new version); the value subject does not
    evolved_key = dict(topic.key_schema)
    evolved_key["fields"] = [
        *topic.key_schema["fields"],
        {"name": "region", "type": ["null", "string"], "default": None},
    ]
    register(schema_registry.url, f"{topic.name}-key", evolved_key)
    with pytest.raises(StalePlanError) as refused:
        ApplyTask(project, load_plan(saved), spark=spark).run()
    assert "key registry schema version was 1, now 2" in str(refused.value)
    assert "registry schema version was" not in str(refused.value).replace("key registry", "")
    with pytest.raises(NoSuchTableError):  # the refused apply created nothing
        env.pyiceberg_table()

    # a fresh plan sees version 2 and applies
    assert apply(spark, env).records_written == 2
    assert rows_by_reader(env, spark, "id") == expect(topic, {1: ("a", 1), 2: ("b", 2)})


def test_upsert_table_with_transforms_keeps_a_column_the_topic_schema_removed(
    spark: Any, make_env: Any, topic: Topic
) -> None:
    """v2 -> v1 of the value schema removes `country`; the table (with transforms) keeps the
    column: an updated key's new row holds NULL there, an untouched key keeps its value.
    Tombstones pass the transforms: a filter or a dedup never drops a delete."""
    transforms = [
        {"type": "filter", "where": "amount > 0"},  # NULL on a tombstone: still a delete
        {"type": "dedup", "keys": ["name"]},  # tombstones all have name NULL
        {"type": "derive", "column": "label", "expression": "upper(name)"},
    ]
    env = make_env(topic.name, metadata_columns=[], transforms=transforms, **table_config(topic))
    topic.produce(
        [(0, 1, ("a", 1, "fr")), (1, 2, ("b", 2, "de")), (1, 4, ("d", 4, "it")),
         (0, 5, ("e", 5, "es"))],
        version=2,
    )  # fmt: skip
    apply(spark, env)
    # v1 has no `country`; two tombstones in one batch
    topic.produce([(0, 1, ("a2", 11)), (1, 3, ("c", 3)), (1, 4, None), (0, 5, None)], version=1)
    second = apply(spark, env)
    # Two rows written and two deletes (tombstones are their own term of the accounting).
    assert second.ddl == ("evolve_schema:t",) and second.records_read == 4
    assert second.records_written == 2
    assert second.accounting is not None and second.accounting["totals"]["tombstones"] == 2
    assert rows_by_reader(env, spark, "id") == expect(topic, {1: ("a2", 11), 2: ("b", 2),
                                                              3: ("c", 3)})  # fmt: skip
    table = env.pyiceberg_table()
    assert not table.schema().find_field("country").required
    landed = {r["id"]: (r["country"], r["label"]) for r in table.scan().to_arrow().to_pylist()}
    assert landed == {1: (None, "A2"), 2: ("de", "B"), 3: (None, "C")}


def test_upsert_checks_judge_records_and_never_block_a_delete(
    spark: Any, make_env: Any, topic: Topic
) -> None:
    checks = [
        {"type": "not_null", "columns": ["name"]},  # a tombstone's name is NULL
        {"type": "range", "column": "amount", "min": 0, "on_failure": "skip"},
    ]
    env = make_env(topic.name, metadata_columns=[], checks=checks, **table_config(topic))
    topic.produce([(0, 1, ("a", 1)), (1, 2, ("b", 2))])
    apply(spark, env)
    topic.produce([(0, 1, None), (1, 3, ("c", -3)), (1, 4, ("d", 4))])  # delete, skip, insert
    second = apply(spark, env)
    assert second.records_skipped == 1 and second.checks is not None
    assert rows_by_reader(env, spark, "id") == expect(topic, {2: ("b", 2), 4: ("d", 4)})


def test_upsert_table_whose_only_transform_ran_while_decoding(
    spark: Any, make_env: Any, topic: Topic
) -> None:
    """A mask of a text value column runs in the decode tasks, and then the transform stage
    has nothing left to run in Spark: the rows go on as decoded (tombstones included),
    aligned to the table (a column the topic's schema removed stays, NULL on new rows),
    counted as the decoded rows."""
    transforms = [{"type": "mask", "columns": ["name"], "method": "redact", "replacement": "*"}]
    env = make_env(topic.name, metadata_columns=[], transforms=transforms, **table_config(topic))
    topic.produce([(0, 1, ("a", 1, "fr")), (1, 2, ("b", 2, "de")), (1, 4, ("d", 4, "it"))],
                  version=2)  # fmt: skip
    apply(spark, env)
    topic.produce([(0, 1, ("a2", 11)), (1, 3, ("c", 3)), (1, 4, None)], version=1)
    second = apply(spark, env)
    assert second.records_read == 3 and second.records_written == 2
    assert second.transforms is not None
    assert (second.transforms["rows_in"], second.transforms["rows_out"]) == (3, 3)
    assert second.accounting is not None and second.accounting["totals"]["tombstones"] == 1
    assert rows_by_reader(env, spark, "id") == expect(topic, {1: ("*", 11), 2: ("*", 2),
                                                              3: ("*", 3)})  # fmt: skip
    landed = {r["id"]: r["country"] for r in env.pyiceberg_table().scan().to_arrow().to_pylist()}
    assert landed == {1: None, 2: "de", 3: None}


def test_tableflow_run_keeps_a_reader_process_beside_an_upsert_table_and_ends_it(
    make_env: Any, kafka_broker: KafkaBroker, schema_registry: Any, tmp_path: Path
) -> None:
    """`tableflow run` (the CLI) of an upsert table starts its reader process
    (engine/reader_process.py), keeps it across cycles and ends it with itself."""
    topic = Topic(kafka_broker, schema_registry.url, "avro")
    env = make_env(topic.name, metadata_columns=[], refresh_interval="1s", **table_config(topic))
    topic.produce(RUN_1)
    once = subprocess.run(
        [sys.executable, "-m", "tableflow_core", "--project-dir", str(env.root), "run", "--once"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert once.returncode == 0, once.stdout + once.stderr  # the first load
    log = tmp_path / "run.log"
    with log.open("w") as out:
        run = subprocess.Popen(
            [sys.executable, "-m", "tableflow_core", "--project-dir", str(env.root), "run"],
            stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
    try:
        reader = _reader_of(run.pid, deadline=time.monotonic() + 120)
        assert reader is not None, log.read_text()
        topic.produce(RUN_2)
        deadline = time.monotonic() + 120
        while rows_by_reader_pyiceberg(env) != expect(topic, AFTER_2):
            assert run.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(1)
        assert Path(f"/proc/{reader}").exists()  # the same reader all along
        run.send_signal(signal.SIGTERM)
        code = run.wait(180)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
    assert code == 0, log.read_text()
    assert not Path(f"/proc/{reader}").exists(), "the reader outlived its run"


def test_a_one_shot_apply_of_a_small_upsert_batch_starts_no_jvm(
    make_env: Any, kafka_broker: KafkaBroker, schema_registry: Any
) -> None:
    """`tableflow apply` (the CLI) of an upsert table: its first load runs Spark's read
    tasks (a JVM starts); its next small batch is read and merged by the driver, and no
    JVM starts at all (`tasks.apply.needs_spark`), though the plan reports maintenance
    due (apply runs none); the table is the model's."""
    topic = Topic(kafka_broker, schema_registry.url, "avro")
    maintenance = {"rewrite_manifests": True}  # due on the table as soon as it exists
    env = make_env(topic.name, metadata_columns=[], maintenance=maintenance, **table_config(topic))
    topic.produce(RUN_1)
    code, output, java = _cli_watching_for_java(env.root, "apply", "--auto-approve")
    assert code == 0 and java, ("the first load runs Spark", output[-3000:])
    topic.produce(RUN_2)
    code, output, java = _cli_watching_for_java(env.root, "plan", "--json")
    assert code == 0 and not java, output[-3000:]
    kinds = {a["kind"] for a in json.loads(output)["actions"]}
    assert kinds == {"ingest", "maintenance_due"}, kinds  # reported: apply runs none
    code, output, java = _cli_watching_for_java(env.root, "apply", "--auto-approve")
    assert code == 0 and not java, ("a small upsert batch needs no JVM", output[-3000:])
    assert rows_by_reader_pyiceberg(env) == expect(topic, AFTER_2)


def _cli_watching_for_java(root: Path, *args: str) -> tuple[int, str, bool]:
    """A tableflow command in its own process group: (exit status, output, whether a java
    process ever ran under it), its descendants looked at every 50 ms."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tableflow_core", "--project-dir", str(root), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    output: list[str] = []
    drain = threading.Thread(target=lambda: output.extend(proc.stdout or ()), daemon=True)
    drain.start()
    java = False
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None:
            assert time.monotonic() < deadline, "".join(output)[-3000:]
            java = java or any(b"java" in _argv(pid)[0] for pid in _descendants(proc.pid))
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    drain.join(10)
    return proc.returncode, "".join(output), java


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{todo.pop()}/task").iterdir():
                children = [int(c) for c in (task / "children").read_text().split()]
                found.extend(children)
                todo.extend(children)
    return found


def _argv(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:  # it ended meanwhile
        return [b""]


def _reader_of(pid: int, deadline: float) -> int | None:
    """The pid of `pid`'s reader process (a child running reader_worker), waited for."""
    while time.monotonic() < deadline:
        for child in _descendants(pid):
            if any(b"reader_worker" in arg for arg in _argv(child)):
                return child
        time.sleep(0.5)
    return None


def rows_by_reader_pyiceberg(env: Any) -> dict[Any, tuple[Any, ...]]:
    rows = env.pyiceberg_table().scan().to_arrow().to_pylist()
    return {r["id"]: (r["id"], r["name"], r["amount"]) for r in rows}
