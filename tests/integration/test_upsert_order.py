"""Upsert tables: one answer per key whatever the run boundaries (issue #27).

Records of a key move between partitions and carry explicit Kafka timestamps unrelated to
their partition and offset (a producer's CreateTime), tombstones among them and records a
`filter` takes out. An independent model says what must land: per key, the latest record
by (timestamp, partition, offset); a row when it has a value the filter keeps, no row
when it is a tombstone or a record the filter takes out (Flink's upsert semantics). The
same records are applied by tables that split them into runs differently (one run; many
runs of a few records each, `max_records_per_run`, which reads partitions at the same
pace so a later run often reads an older record of a key), and every table must equal the
model, read by pyiceberg and DuckDB; still after `maintain` compacted the deletes table
and late records (many older than their key's delete) were applied.

Also: records whose value key fields differ from their Kafka key are bad records routed
by `on_error` (never an orphan row a tombstone of the key could not delete), and plan
says when the key schema lets a key field be null.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.ingest import sharing
from tableflow_core.pipeline import shared_run
from tableflow_core.pipeline.runners import write_upsert
from tableflow_core.readers.duckdb_reader import duckdb_connection
from tableflow_core.tasks.maintain import MaintainTask
from tableflow_core.tasks.plan import PlanTask
from tests.avro_records import avro_record
from tests.fixtures.apply_env import Env, apply
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.integration.test_maintenance_spark import data_files

pytestmark = pytest.mark.slow

VALUE = avro_record("Account", id="long", name="string", status="string")
KEY = {"type": "record", "name": "AccountKey", "fields": [{"name": "id", "type": "long"}]}
NULLABLE_KEY = {
    "type": "record",
    "name": "AccountKey",
    "fields": [{"name": "id", "type": ["null", "long"], "default": None}],
}
UPSERT = {"mode": "upsert", "key_columns": ["id"], "key": {"format": "avro"}}
FILTER = [{"type": "filter", "where": "status <> 'TEST'"}]
PARTITIONS = 3
NOW = int(time.time() * 1000)


class Accounts:
    """A keyed topic; `records` holds what was produced:
    (key, partition, offset, timestamp ms, value or None for a tombstone)."""

    def __init__(self, broker: KafkaBroker, registry: SchemaRegistryServer, key: Any = KEY):
        self.name = broker.create_topic(unique_name("accounts"), PARTITIONS)
        self.broker = broker
        client = registry.client()
        self._value = AvroSerializer(client, json.dumps(VALUE))
        self._key = AvroSerializer(client, json.dumps(key))
        self.records: list[tuple[int, int, int, int, dict[str, Any] | None]] = []

    def register_value_schema(self) -> None:
        """The value subject, registered as the first value produced would."""
        value = {"id": 0, "name": "", "status": ""}
        self._value(value, SerializationContext(self.name, MessageField.VALUE))

    def produce(self, records: list[tuple[int, int, int, dict[str, Any] | None]],
                key_of: Any = None) -> None:  # fmt: skip
        """(key, partition, timestamp ms, value or None) each, in this order."""
        producer = Producer(self.broker.producer_config(**{"linger.ms": 0}))
        offsets = {p: sum(1 for r in self.records if r[1] == p) for p in range(PARTITIONS)}
        for key, partition, timestamp, value in records:
            key_bytes = self._key(
                {"id": key_of(key) if key_of else key},
                SerializationContext(self.name, MessageField.KEY),
            )
            value_bytes = None
            if value is not None:
                value_bytes = self._value(
                    value, SerializationContext(self.name, MessageField.VALUE)
                )
            producer.produce(self.name, value_bytes, key_bytes, partition=partition,
                             timestamp=timestamp)  # fmt: skip
            producer.flush(10)  # one at a time: the offsets are the order given
            self.records.append((key, partition, offsets[partition], timestamp, value))
            offsets[partition] += 1


@pytest.fixture
def topic(kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer) -> Accounts:
    return Accounts(kafka_broker, schema_registry)


def model(
    records: list[tuple[int, int, int, int, dict[str, Any] | None]], filtered: bool = True
) -> dict[int, tuple]:
    """What an upsert table with the filter must hold: per key, its latest record by
    (timestamp, partition, offset); no row when that is a tombstone or filtered out
    (`filtered`: the table has the filter)."""
    latest: dict[int, tuple[tuple[int, int, int], dict[str, Any] | None]] = {}
    for key, partition, offset, timestamp, value in records:
        position = (timestamp, partition, offset)
        if key not in latest or position > latest[key][0]:
            latest[key] = (position, value)
    return {
        key: (value["name"], value["status"])
        for key, (_, value) in latest.items()
        if value is not None and not (filtered and value["status"] == "TEST")
    }


def table_rows(env: Env) -> dict[int, tuple]:
    """{id: (name, status)} by pyiceberg; DuckDB (with the delete files) must agree."""
    rows = env.pyiceberg_table().scan().to_arrow().to_pylist()
    by_id = {r["id"]: (r["name"], r["status"]) for r in rows}
    assert len(by_id) == len(rows)
    location = env.pyiceberg_table().metadata_location
    duck = (
        duckdb_connection()
        .sql(f"SELECT id, name, status FROM iceberg_scan('{location}')")
        .fetchall()
    )
    assert {r[0]: (r[1], r[2]) for r in duck} == by_id and len(duck) == len(by_id)
    return by_id


def delete_files(env: Env) -> int:
    """The delete files a reader of the table applies."""
    return sum(len(task.delete_files) for task in env.pyiceberg_table().scan().plan_files())


def apply_until_done(spark: Any, env: Env) -> int:
    """Apply until nothing is left to read; the number of runs that ingested."""
    runs = 0
    while True:
        result = apply(spark, env)
        if result.status == "no_changes" or not result.records_read:
            return runs
        runs += 1


def random_history(seed: int, keys: int, size: int) -> list[tuple[int, int, int, Any]]:
    """Records of `keys` keys over every partition, with timestamps in no relation to
    partitions or offsets (ties included), ~15% tombstones, ~15% filtered out."""
    rng = random.Random(seed)
    base = NOW - size * 1000  # recent: a broker's retention keeps them
    history = []
    for i in range(size):
        key = rng.randrange(keys)
        timestamp = base + rng.randrange(size // 2) * 1000  # many records share a millisecond
        roll = rng.random()
        value = None if roll < 0.15 else {
            "id": key, "name": f"n{i}", "status": "TEST" if roll < 0.3 else "OPEN",
        }  # fmt: skip
        history.append((key, rng.randrange(PARTITIONS), timestamp, value))
    return history


def test_the_same_records_in_different_run_splits_give_the_same_table(
    spark: Any, make_env: Any, topic: Accounts
) -> None:
    config = {**UPSERT, "metadata_columns": [], "transforms": FILTER}
    # A first part, applied by every table; then the rest, which the tables split apart.
    history = random_history(seed=27, keys=40, size=240)
    topic.produce(history[:60])
    whole = make_env(topic.name, **config)
    maintenance = {"every": "1h", "compact": {"min_input_files": 2}}
    small = make_env(topic.name, **config, max_records_per_run=20, maintenance=maintenance)
    medium = make_env(topic.name, **config, max_records_per_run=61)
    for env in (whole, small, medium):
        apply_until_done(spark, env)
    expected = model(topic.records)
    assert table_rows(whole) == expected

    topic.produce(history[60:])
    expected = model(topic.records)
    # The records tell the rules apart: by the run, then (partition, offset) (main before
    # issue #27) many keys end on another record than by (timestamp, partition, offset).
    runs = sorted((i >= 60, r[1], r[2], r) for i, r in enumerate(topic.records))
    by_run = {key: value for *_, (key, _, _, _, value) in runs}
    by_time = {
        key: value for key, *_, value in sorted(topic.records, key=lambda r: (r[3], r[1], r[2]))
    }
    assert sum(by_run[k] != by_time[k] for k in by_time) >= 5
    assert apply_until_done(spark, whole) == 1
    assert apply_until_done(spark, small) >= 9
    assert apply_until_done(spark, medium) >= 3
    for env in (whole, small, medium):
        assert table_rows(env) == expected
    # The deletes table remembers each key's latest delete (no row, nothing else to say it)
    deletes = small.catalog.pyiceberg_catalog().load_table(
        f"{small.namespace}.t__tableflow_deletes"
    )
    remembered = {r["id"] for r in deletes.scan().to_arrow().to_pylist()}
    deleted = {k for k in {r[0] for r in topic.records} if k not in expected}
    assert deleted <= remembered

    # `maintain` compacts the deletes table (a commit per run that deleted) with its
    # table, and the answers hold after it: late records, many older than their key's
    # remembered delete, go to the compacted deletes table.
    catalog = small.catalog.pyiceberg_catalog()
    name = f"{small.namespace}.t__tableflow_deletes"
    files_before = data_files(catalog, name)
    (done,) = MaintainTask(small.project, small.project.tables, spark=spark, force=True).run()
    assert done.ok and done.deletes is not None, done
    assert [r.operation for r in done.deletes.results] == ["compact"]
    assert data_files(catalog, name) < files_before
    assert table_rows(small) == expected
    topic.produce(random_history(seed=28, keys=40, size=40))
    expected = model(topic.records)
    assert expected != table_rows(small)
    for env in (whole, small):
        apply_until_done(spark, env)
        assert table_rows(env) == expected


def test_driver_merges_equal_spark_merges_in_any_run_split_and_after_maintain(
    spark: Any, make_env: Any, topic: Accounts
) -> None:
    """Without transforms a small batch is merged on the driver (pipeline/upsert_rows.py):
    position delete files and a data file in one snapshot. Split into runs differently,
    the tables equal the model and a table sorted by its key (which takes Spark's MERGE);
    `maintain` compacts the driver's files, and late records still land as the model says."""
    topic.produce(random_history(seed=41, keys=40, size=240))
    config = {**UPSERT, "metadata_columns": []}
    maintenance = {"every": "1h", "compact": {"min_input_files": 2}}
    whole = make_env(topic.name, **config)
    small = make_env(topic.name, **config, max_records_per_run=20, maintenance=maintenance)
    by_spark = make_env(topic.name, **config, sort_by=["id"], max_records_per_run=29)
    writers: dict[str, set[bool]] = {"whole": set(), "small": set(), "by_spark": set()}
    for label, env in (("whole", whole), ("small", small), ("by_spark", by_spark)):
        while (result := apply(spark, env)).status != "no_changes" and result.records_read:
            writers[label].add("shared_job" in (result.timings or {}))
    assert writers == {"whole": {True}, "small": {True}, "by_spark": {False}}
    expected = model(topic.records, filtered=False)
    assert table_rows(whole) == table_rows(small) == table_rows(by_spark) == expected

    # No `maintenance:` block: what `tableflow run` runs after a refresh is the rewrite its
    # delete files make due (maintenance/delete_load.py), on the driver
    # (pipeline/apply_deletes.py); readers then apply none.
    assert delete_files(by_spark) > 0
    # `maintain --dry-run` (and plan) show it as any due operation, with its rule.
    (dry,) = MaintainTask(by_spark.project, by_spark.project.tables, dry_run=True).run()
    (shown,) = [d.describe() for d in dry.due]
    assert shown.startswith("apply_deletes on ") and "rows in data files with deletes" in shown
    (done,) = MaintainTask(by_spark.project, by_spark.project.tables, spark=spark).run()
    assert done.ok and [(d.operation, d.for_deletes) for d in done.due] == [("apply_deletes", True)]
    assert delete_files(by_spark) == 0
    assert table_rows(by_spark) == expected

    (done,) = MaintainTask(small.project, small.project.tables, spark=spark, force=True).run()
    assert done.ok, done
    assert table_rows(small) == expected
    topic.produce(random_history(seed=42, keys=40, size=60))
    expected = model(topic.records, filtered=False)
    assert expected != table_rows(small)
    for env in (whole, small, by_spark):
        apply_until_done(spark, env)
        assert table_rows(env) == expected


def test_piled_up_delete_files_are_merged_and_the_rows_stay_the_model_s(
    spark: Any, make_env: Any, topic: Accounts
) -> None:
    """Small batches that each touch every data file pile up delete files (4 per data
    file) long before rewriting the data files they hit fits its budget (37 rows per row
    deleted: 6000 rows, ~110 deleted): what is due is the merge of the delete files
    (maintenance/delete_load.py), not the rewrite; after it readers apply fewer delete
    files and still read the model's rows (pyiceberg and DuckDB)."""
    base = NOW - 100_000
    topic.produce([(k, k % PARTITIONS, base, {"id": k, "name": "first", "status": "OPEN"})
                   for k in range(6000)])  # fmt: skip
    env = make_env(topic.name, **UPSERT, metadata_columns=[])
    apply(spark, env)
    for batch in range(1, 9):
        # Ten original keys, and one key still in each earlier batch's data file.
        keys = [100 * batch + i for i in range(10)]
        keys += [100 * earlier + (batch - earlier - 1) for earlier in range(1, batch)]
        topic.produce([(k, k % PARTITIONS, base + batch * 1000,
                        {"id": k, "name": f"b{batch}", "status": "OPEN"}) for k in keys])  # fmt: skip
        assert apply(spark, env).records_read == len(keys)
    expected = model(topic.records, filtered=False)
    piled = delete_files(env)
    (done,) = MaintainTask(env.project, env.project.tables, spark=spark).run()
    assert done.ok, done
    assert [(d.operation, d.for_deletes) for d in done.due] == [("rewrite_deletes", True)]
    assert delete_files(env) < piled
    assert table_rows(env) == expected


def test_batches_too_large_to_broadcast_give_the_same_table(
    spark: Any, make_env: Any, monkeypatch: pytest.MonkeyPatch, topic: Accounts
) -> None:
    # Every batch into the non-empty table takes the shuffled MERGE (a backfill's way; the
    # first load only appends since issue 45); the test above takes
    # the broadcast one (append of new keys, then a WHEN MATCHED-only MERGE). Both end on
    # the model's table, run after run, deletes remembered.
    monkeypatch.setattr(write_upsert, "BROADCAST_RECORDS", 0)
    topic.produce(random_history(seed=31, keys=30, size=150))
    env = make_env(topic.name, **UPSERT, metadata_columns=[], transforms=FILTER,
                   max_records_per_run=40)  # fmt: skip
    assert apply_until_done(spark, env) >= 4
    assert table_rows(env) == model(topic.records)


def test_a_first_load_split_across_runs_gives_the_same_table(
    spark: Any, make_env: Any, monkeypatch: pytest.MonkeyPatch, topic: Accounts
) -> None:
    """A batch into an empty table (a first load) is reduced to each key's latest record
    and appended, no MERGE: on the driver when the run creates the table, on Spark (a
    window, then an append) otherwise or when larger. Limits lowered so that these small
    batches take every way: a table whose first run found only tombstones (no rows, a
    deletes table) then loads on Spark, and its keys' older records stay dropped; a first
    load split across runs goes on with Spark's MERGE. Every table equals the model."""
    monkeypatch.setattr(sharing, "UPSERT_DRIVER_MAX_RECORDS", 10)
    monkeypatch.setattr(shared_run, "UPSERT_DRIVER_MAX_RECORDS", 10)
    monkeypatch.setattr(write_upsert, "BROADCAST_RECORDS", 0)
    merges: list[str] = []
    run_merge = write_upsert._run_merge

    def counted(*args: Any, **kwargs: Any) -> None:
        merges.append("merge")
        run_merge(*args, **kwargs)

    monkeypatch.setattr(write_upsert, "_run_merge", counted)
    topic.register_value_schema()  # the first records are tombstones: values come later
    config = {**UPSERT, "metadata_columns": []}
    # Deletes of keys 0-4, later than every record of the history below.
    topic.produce([(k, k % PARTITIONS, NOW + 10**6, None) for k in range(5)])
    deleted_first = make_env(topic.name, **config)
    result = apply(spark, deleted_first)
    assert "shared_job" in (result.timings or {}) and not merges
    assert table_rows(deleted_first) == {}

    topic.produce(random_history(seed=45, keys=40, size=150))
    expected = model(topic.records, filtered=False)
    assert not set(expected) & set(range(5))
    result = apply(spark, deleted_first)  # the table exists: Spark's window and append
    assert "shared_job" not in (result.timings or {}) and not merges
    assert result.records_read == 150
    assert table_rows(deleted_first) == expected

    split = make_env(topic.name, **config, max_records_per_run=50)
    result = apply(spark, split)  # a first load on the driver, then Spark's MERGEs
    assert "shared_job" in (result.timings or {}) and not merges
    assert apply_until_done(spark, split) >= 2 and merges
    assert table_rows(split) == expected

    merges.clear()
    monkeypatch.setattr(sharing, "FIRST_LOAD_DRIVER_MAX_RECORDS", 0)
    whole = make_env(topic.name, **config)
    result = apply(spark, whole)  # too large for the driver: Spark's window and append
    assert "shared_job" not in (result.timings or {}) and not merges
    assert table_rows(whole) == expected

    # Records under the limit whose Arrow outgrows what the driver holds: on Spark too.
    monkeypatch.setattr(sharing, "FIRST_LOAD_DRIVER_MAX_RECORDS", 10**6)
    monkeypatch.setattr(shared_run, "UPSERT_DRIVER_MAX_BYTES", 1)
    wide = make_env(topic.name, **config)
    result = apply(spark, wide)
    assert any("MiB of Arrow" in w for w in result.warnings), result.warnings
    assert not merges and table_rows(wide) == expected


def test_a_filtered_latest_record_retracts_its_key(
    spark: Any, make_env: Any, topic: Accounts
) -> None:
    env = make_env(topic.name, **UPSERT, metadata_columns=[], transforms=FILTER)
    t = NOW
    topic.produce([
        (1, 0, t, {"id": 1, "name": "k1", "status": "NEW"}),
        (2, 1, t + 1, {"id": 2, "name": "k2", "status": "TEST"}),
        (2, 1, t + 2, {"id": 2, "name": "k2b", "status": "NEW"}),
    ])  # fmt: skip
    apply(spark, env)
    assert table_rows(env) == {1: ("k1", "NEW"), 2: ("k2b", "NEW")}
    # k1's latest record is filtered out: its row goes (Flink's upsert semantics)
    topic.produce([(1, 2, t + 3, {"id": 1, "name": "k1", "status": "TEST"})])
    result = apply(spark, env)
    assert table_rows(env) == {2: ("k2b", "NEW")} == model(topic.records)
    assert result.accounting is not None
    totals = result.accounting["totals"]
    assert (totals["read"], totals["filtered"], totals["written"], totals["tombstones"]) == (
        1, 1, 0, 0,
    )  # fmt: skip


def test_value_key_fields_that_differ_from_the_kafka_key_are_bad_records(
    spark: Any, make_env: Any, topic: Accounts
) -> None:
    t = NOW
    topic.produce([
        (1, 0, t, {"id": 1, "name": "a", "status": "OPEN"}),
        (2, 0, t + 1, {"id": 7, "name": "b", "status": "OPEN"}),  # keyed 2, says 7
        (3, 0, t + 2, {"id": 3, "name": "c", "status": "OPEN"}),
    ])  # fmt: skip
    env = make_env(topic.name, **UPSERT, metadata_columns=[])
    failed = apply(spark, env, expect="error")
    assert "offset 1" in (failed.error or "") and "'id' differs" in (failed.error or "")
    env.configure(**UPSERT, metadata_columns=[], on_error="skip")
    result = apply(spark, env)
    assert table_rows(env) == {1: ("a", "OPEN"), 3: ("c", "OPEN")}  # no orphan row 7
    assert result.accounting is not None and result.accounting["totals"]["skipped"] == 1
    # a tombstone of key 2 has nothing to find, and nothing stays behind
    topic.produce([(2, 0, t + 3, None)])
    apply(spark, env)
    assert table_rows(env) == {1: ("a", "OPEN"), 3: ("c", "OPEN")}


def test_plan_says_when_the_key_schema_lets_a_key_field_be_null(
    make_env: Any, kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer
) -> None:
    topic = Accounts(kafka_broker, schema_registry, key=NULLABLE_KEY)
    topic.produce([(1, 0, NOW, {"id": 1, "name": "a", "status": "OPEN"})])
    env = make_env(topic.name, **UPSERT, metadata_columns=[])
    project = env.project
    plan = PlanTask(project, project.tables).run()
    (warning,) = plan.warnings
    assert f"subject {topic.name}-key" in warning.message
    assert "key field(s) id be null" in warning.message and "bad record" in warning.message


def test_run_applies_deletes_after_a_batch_and_the_next_batch_finds_its_index_warm(
    spark: Any, make_env: Any, topic: Accounts
) -> None:
    """`tableflow run` on an upsert table: a batch of updates leaves delete files on every
    data file; the maintenance lane applies them on the driver (`apply_deletes`, under the
    table's lock) and remaps the key index the ingest lane keeps warm, so the next batch
    looks its keys up without building it. The table is the model's after each cycle
    (pyiceberg and DuckDB)."""
    from tableflow_core.pipeline.key_index import INDEXES
    from tableflow_core.tasks.run import CycleReport, RunTask
    from tests.integration.test_run_maintenance import after_maintenance

    INDEXES.clear()
    topic.produce([(k, k % PARTITIONS, NOW - 100_000, {"id": k, "name": "first", "status": "OPEN"})
                   for k in range(60)])  # fmt: skip
    env = make_env(topic.name, **UPSERT, metadata_columns=[], refresh_interval="1s")
    seen: list[tuple[CycleReport, dict[int, tuple], int]] = []

    def after(report: CycleReport) -> None:
        seen.append((report, table_rows(env), delete_files(env)))
        assert seen[-1][1] == model(topic.records, filtered=False)
        if len(seen) < 3:  # the next batch: updates and tombstones of the table's keys
            topic.produce(random_history(seed=60 + len(seen), keys=60, size=50))

    reports = RunTask(
        env.project,
        env.project.tables,
        spark_factory=lambda: spark,
        max_cycles=3,
        on_cycle=after_maintenance(after),
    ).run()
    assert all(r.ok for r in reports), reports
    first, second, third = seen
    assert first[0].results.tables[0].records_written == 60
    assert third[2] == 0  # the third batch's deletes applied too
    # Built from the first load's places (pipeline/first_load.py: no read of the table),
    # kept warm by the second, remapped by the rewrite: the third batch (after a replace
    # snapshot that moved every row) builds nothing.
    timings = [s[0].results.tables[0].timings or {} for s in seen]
    assert "index_build" not in timings[0] and "index_advance" in timings[0], timings
    assert all("index_build" not in t and "index_lookup" in t for t in timings[1:]), timings
    (maintained,) = second[0].maintenance
    assert maintained.report is not None and maintained.ok, maintained
    assert [r.operation for r in maintained.report.results] == ["apply_deletes"]
    assert maintained.report.results[0].metrics["index_remapped"] is True
    assert second[2] == 0  # no delete file left after the maintenance
    INDEXES.clear()
