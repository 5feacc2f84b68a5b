"""Transforms and checks end to end: real broker, registry, catalog server and Spark,
through plan + apply; read back by pyiceberg, DuckDB and the Parquet files themselves."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.state.offsets import OFFSETS_KEY
from tableflow_core.tasks.plan import PlanTask
from tests.avro_records import avro_record, nullable
from tests.fixtures.apply_env import Env, apply
from tests.fixtures.dead_letters import read_dead_letters
from tests.fixtures.stack import KafkaBroker, unique_name

pytestmark = pytest.mark.slow

SALT = "pepper-3f9a"
ORDER_SCHEMA = avro_record(
    "Order",
    namespace="tableflow.test",
    order_id="string",
    email="string",
    card="string",
    notes=nullable("string"),
    status="string",
    amount="double",
    quantity="long",
)
TRANSFORMS: list[dict[str, Any]] = [
    {"type": "dedup", "keys": ["order_id"], "keep": "last"},
    {"type": "filter", "where": "status <> 'TEST'"},
    {"type": "derive", "column": "total", "expression": "CAST(amount * quantity AS DOUBLE)"},
    {"type": "mask", "columns": ["email"], "method": "hash",
     "salt": "{{ env_var('TF_TEST_MASK_SALT') }}"},
    {"type": "mask", "columns": ["card"], "method": "partial", "keep_first": 0, "keep_last": 4},
    {"type": "mask", "columns": ["notes"], "method": "redact", "replacement": "****"},
    {"type": "rename", "columns": {"order_id": "id"}},
    {"type": "drop", "columns": ["quantity"]},
]  # fmt: skip


class Orders:
    def __init__(self, broker: KafkaBroker, registry_url: str) -> None:
        self.name = broker.create_topic(unique_name("orders-tf"), 1)
        self.bootstrap = broker.bootstrap
        client = SchemaRegistryClient({"url": registry_url})
        self.serializer = AvroSerializer(client, json.dumps(ORDER_SCHEMA))

    def produce(self, *orders: tuple[str, str, str, str | None, str, float, int]) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap})
        context = SerializationContext(self.name, MessageField.VALUE)
        for order_id, email, card, notes, status, amount, quantity in orders:
            value = {"order_id": order_id, "email": email, "card": card, "notes": notes,
                     "status": status, "amount": amount, "quantity": quantity}  # fmt: skip
            producer.produce(self.name, self.serializer(value, context), partition=0)
        producer.flush(30)


def assert_nothing_published(env: Env, snapshot: Any, rows: int, unread: int) -> None:
    """A failed run left main at `snapshot` with its `rows`, and did not move the offsets:
    the next plan reads its `unread` records again."""
    table = env.pyiceberg_table()
    assert table.current_snapshot().snapshot_id == snapshot.snapshot_id
    assert table.scan().to_arrow().num_rows == rows
    actions = PlanTask(env.project, env.project.tables).run().actions
    assert next(a for a in actions if a.kind == "ingest").records == unread


@pytest.fixture
def orders(kafka_broker: KafkaBroker, schema_registry: Any) -> Orders:
    return Orders(kafka_broker, schema_registry.url)


def hashed(value: str) -> str:
    return hashlib.sha256((SALT + value).encode()).hexdigest()


def rows(env: Env) -> dict[str, dict[str, Any]]:
    """The table by id, read by pyiceberg; DuckDB must read the same rows."""
    from tableflow_core.readers.duckdb_reader import attach_rest_catalog, duckdb_connection
    from tableflow_core.targets.catalog import open_catalog

    by_pyiceberg = {r["id"]: r for r in env.pyiceberg_table().scan().to_arrow().to_pylist()}
    with open_catalog(env.project) as handle:
        props = handle.spark_properties
        con = duckdb_connection()
        attach_rest_catalog(con, handle.spark_name, props["uri"], props.get("credential"))
        cursor = con.sql(f"SELECT * FROM {handle.spark_name}.{env.namespace}.t")
        names = [d[0] for d in cursor.description]
        by_duckdb = {r[0]: dict(zip(names, r, strict=True)) for r in cursor.fetchall()}
    assert names[0] == "id"
    assert by_duckdb == by_pyiceberg
    return by_pyiceberg


def data_files(env: Env) -> list[Path]:
    table = env.pyiceberg_table()
    return [Path(urlparse(t.file.file_path).path) for t in table.scan().plan_files()]


def run_results(env: Env) -> dict[str, Any]:
    document = json.loads((env.root / "target" / "run_results.json").read_text())
    (table,) = document["tables"]
    return dict(table)


def test_masks_dedup_filter_derive_rename_drop_land_masked_and_once(
    spark: Any, make_env: Any, monkeypatch: pytest.MonkeyPatch, orders: Orders
) -> None:
    monkeypatch.setenv("TF_TEST_MASK_SALT", SALT)
    env = make_env(orders.name, metadata_columns=[], transforms=TRANSFORMS)
    orders.produce(
        ("o1", "alice@example.com", "4111111111111111", "ring the bell", "PAID", 10.0, 1),
        ("o2", "bob@example.com", "5500000000000004", None, "TEST", 5.0, 2),  # filtered
        ("o1", "alice@example.com", "4111111111111111", "ring twice", "PAID", 12.0, 2),  # last
        ("o3", "carol@example.com", "378282246310005", None, "PAID", 7.5, 3),
    )
    plan = PlanTask(env.project, env.project.tables).run()
    create = next(a for a in plan.actions if a.kind == "create_table")
    assert [c.name for c in create.columns] == ["id", "email", "card", "notes", "status",
                                               "amount", "total"]  # fmt: skip
    assert SALT not in plan.model_dump_json()
    first = apply(spark, env)
    assert first.records_read == 4 and first.records_written == 2
    assert first.transforms is not None
    assert first.transforms["filtered"] == 1 and first.transforms["duplicates"] == 1
    assert first.transforms["rows_out"] == 2
    assert rows(env) == {
        "o1": {"id": "o1", "email": hashed("alice@example.com"), "card": "************1111",
               "notes": "****", "status": "PAID", "amount": 12.0, "total": 24.0},
        "o3": {"id": "o3", "email": hashed("carol@example.com"), "card": "***********0005",
               "notes": None, "status": "PAID", "amount": 7.5, "total": 22.5},
    }  # fmt: skip

    # a replayed key is not written again (dedup against the table); a new one is
    orders.produce(
        ("o1", "alice@example.com", "4111111111111111", "again", "PAID", 99.0, 1),
        ("o4", "dave@example.com", "6011111111111117", "gate code 4471", "PLACED", 3.0, 1),
    )
    second = apply(spark, env)
    assert second.records_read == 2 and second.records_written == 1
    assert second.offsets_after == {0: 6}
    assert second.transforms is not None and second.transforms["already_in_table"] == 1
    landed = rows(env)
    assert sorted(landed) == ["o1", "o3", "o4"] and landed["o1"]["amount"] == 12.0
    assert landed["o4"]["email"] == hashed("dave@example.com")
    assert run_results(env)["transforms"]["already_in_table"] == 1

    # no clear masked value anywhere in the data files: values, statistics, raw bytes
    clear = ["alice@example.com", "carol@example.com", "dave@example.com", "4111111111111111",
             "378282246310005", "6011111111111117", "ring twice", "gate code 4471", SALT]  # fmt: skip
    files = data_files(env)
    assert files
    for path in files:
        raw = path.read_bytes()
        values = json.dumps(pq.read_table(path).to_pylist())
        metadata = str(pq.ParquetFile(path).metadata.to_dict())
        for text in clear:
            assert text.encode() not in raw, (path, text)
            assert text not in values and text not in metadata


def test_checks_error_blocks_publish_warn_is_reported_skip_drops_rows(
    spark: Any, make_env: Any, orders: Orders
) -> None:
    checks: list[dict[str, Any]] = [
        {"type": "range", "column": "quantity", "min": 1, "max": 100, "on_failure": "skip"},
        {"type": "accepted_values", "column": "status", "values": ["PAID", "PLACED"],
         "severity": "warn"},
        {"type": "row_count", "min": 1},
    ]  # fmt: skip
    env = make_env(orders.name, metadata_columns=[], checks=checks)
    orders.produce(
        ("o1", "a@x", "1", None, "PAID", 1.0, 1),
        ("o2", "b@x", "2", None, "PAID", 2.0, 0),  # out of range: skipped
        ("o3", "c@x", "3", None, "WEIRD", 3.0, 2),  # not accepted: warned, written
    )
    first = apply(spark, env)
    assert first.records_read == 3 and first.records_written == 2 and first.records_skipped == 1
    assert sorted(r["order_id"] for r in env.pyiceberg_table().scan().to_arrow().to_pylist()) == [
        "o1",
        "o3",
    ]
    report = run_results(env)["checks"]
    assert report["outcome"] == "warn" and report["rows_skipped"] == 1
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["range(quantity)"]["failing"] == 1
    assert by_name["range(quantity)"]["action"] == "skipped"
    assert by_name["accepted_values(status)"]["outcome"] == "warn"
    assert by_name["accepted_values(status)"]["failing"] == 1
    assert by_name["row_count"]["outcome"] == "pass"
    snapshot = env.pyiceberg_table().current_snapshot()
    summary = snapshot.summary.additional_properties
    # a skip check that took rows out warns (the batch was published without them)
    assert summary["tableflow.checks"] == "warn: 1 passed, 2 warned, 0 failed"
    assert summary["tableflow.checks.failing"] == "range(quantity)=1;accepted_values(status)=1"
    assert summary["tableflow.checks.skipped-rows"] == "1"
    assert OFFSETS_KEY in summary

    # severity error (on_failure: the table's on_error, fail): nothing is published
    env.configure(
        metadata_columns=[],
        checks=[*checks, {"type": "expression", "name": "small_orders",
                          "expression": "amount < 1000"}],
    )  # fmt: skip
    orders.produce(
        ("o4", "d@x", "4", None, "PAID", 5000.0, 1), ("o5", "e@x", "5", None, "PAID", 5.0, 1)
    )
    failed = apply(spark, env, expect="error")
    assert failed.error is not None
    assert "small_orders" in failed.error and "1 of 2 rows failing" in failed.error
    assert "nothing was published" in failed.error
    assert_nothing_published(env, snapshot, rows=2, unread=2)


def test_checks_that_take_no_rows_out_audit_the_written_branch(
    spark: Any, make_env: Any, orders: Orders
) -> None:
    """warn and fail checks on an append table judge the rows written to the run's branch
    (write-audit-publish, no cached batch): same outcomes, counts and summary."""
    checks: list[dict[str, Any]] = [
        {"type": "accepted_values", "column": "status", "values": ["PAID", "PLACED"],
         "severity": "warn"},
        {"type": "unique", "columns": ["order_id"]},
        {"type": "expression", "name": "small_orders", "expression": "amount < 1000"},
        {"type": "row_count", "min": 1},
    ]  # fmt: skip
    env = make_env(orders.name, metadata_columns=["partition", "offset"], checks=checks)
    orders.produce(
        ("o1", "a@x", "1", None, "PAID", 1.0, 1),
        ("o2", "b@x", "2", None, "WEIRD", 2.0, 1),  # not accepted: warned, written
    )
    first = apply(spark, env)
    assert first.records_read == 2 and first.records_written == 2
    report = run_results(env)["checks"]
    assert report["outcome"] == "warn" and report["rows_evaluated"] == 2
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["accepted_values(status)"]["failing"] == 1
    assert by_name["small_orders"]["failing"] == 0
    snapshot = env.pyiceberg_table().current_snapshot()
    summary = snapshot.summary.additional_properties
    assert summary["tableflow.checks"] == "warn: 3 passed, 1 warned, 0 failed"
    assert OFFSETS_KEY in summary

    # only this run's rows are judged: o1 is a duplicate only because it repeats in this run
    orders.produce(
        ("o3", "c@x", "3", None, "PAID", 5000.0, 1),  # fails small_orders
        ("o1", "d@x", "4", None, "PAID", 5.0, 1),
        ("o1", "e@x", "5", None, "PAID", 6.0, 1),
    )
    failed = apply(spark, env, expect="error")
    assert failed.error is not None
    assert "small_orders [error] fail: 1 of 3 rows failing" in failed.error
    assert "unique(order_id) [error] fail: 2 of 3 rows failing" in failed.error
    assert "nothing was published" in failed.error
    assert '"kafka_offset": 3' in failed.error or '"kafka_offset": 4' in failed.error
    assert_nothing_published(env, snapshot, rows=2, unread=3)
    refs = env.pyiceberg_table().metadata.refs
    assert not [name for name in refs if name != "main"]  # branch dropped


def test_a_derived_value_that_does_not_fit_fails_the_run_under_on_error_fail(
    spark: Any, make_env: Any, orders: Orders
) -> None:
    derive = {"type": "derive", "column": "code", "expression": "CAST(card AS INT)"}
    env = make_env(orders.name, metadata_columns=[], transforms=[derive])
    orders.produce(
        ("o1", "a@x", "42", None, "PAID", 1.0, 1), ("o2", "b@x", "n/a", None, "PAID", 2.0, 1)
    )
    failed = apply(spark, env, expect="error")
    assert failed.error is not None
    assert "1 row(s) rejected by the transforms" in failed.error
    assert "partition 0 offset 1" in failed.error and "n/a" in failed.error
    table = env.pyiceberg_table()
    assert table.scan().to_arrow().num_rows == 0  # nothing lost silently, nothing published
    assert [c.name for c in table.schema().columns][-1] == "code"


def test_a_nested_cast_that_fails_is_dead_lettered_never_written_as_null(
    spark: Any, make_env: Any, kafka_broker: KafkaBroker, orders: Orders
) -> None:

    dlq_topic = kafka_broker.create_topic(unique_name("dlq-tf"), 1)
    transforms = [
        {"type": "derive", "column": "label",
         "expression": "concat(status, '-', CAST(CAST(card AS INT) * 2 AS STRING))"},
        {"type": "derive", "column": "digits",
         "expression": "IF(card RLIKE '^[0-9]+$', CAST(card AS BIGINT), NULL)"},
    ]  # fmt: skip
    env = make_env(
        orders.name,
        metadata_columns=[],
        transforms=transforms,
        on_error="dlq",
        dlq={"type": "kafka", "topic": dlq_topic},
    )
    orders.produce(
        ("o1", "a@x", "21", None, "PAID", 1.0, 1),
        ("o2", "b@x", "n/a", None, "PAID", 2.0, 1),  # nested CAST fails: dead-lettered
        ("o3", "c@x", "5", None, "PAID", 3.0, 1),
    )
    result = apply(spark, env)
    assert result.records_read == 3 and result.records_written == 2
    assert result.transforms is not None and result.transforms["rejected"] == 1
    landed = {r["order_id"]: r for r in env.pyiceberg_table().scan().to_arrow().to_pylist()}
    assert {k: (r["label"], r["digits"]) for k, r in landed.items()} == {
        "o1": ("PAID-42", 21),
        "o3": ("PAID-10", 5),
    }
    (dead,) = read_dead_letters(kafka_broker, dlq_topic, 1)
    assert dead.stage == "transform" and dead.source_offset == 1
    assert "CAST(card AS INT) failed on value n/a" in dead.error_message


ORDER_SCHEMA_V2 = {
    **ORDER_SCHEMA,
    "fields": [f for f in ORDER_SCHEMA["fields"] if f["name"] != "notes"],
}


def test_a_field_removed_from_the_topic_keeps_its_column_on_a_table_with_transforms(
    spark: Any,
    make_env: Any,
    kafka_broker: KafkaBroker,
    schema_registry: Any,
    monkeypatch: pytest.MonkeyPatch,
    orders: Orders,
) -> None:
    """v2 of the topic's schema drops `notes` (passed through the transforms untouched)
    and `quantity` (only dropped by them). As on a table without transforms, `notes` stays,
    optional, and new rows hold null there; plan shows keep_column; nothing else moves."""
    monkeypatch.setenv("TF_TEST_MASK_SALT", SALT)
    transforms = [
        {"type": "derive", "column": "big", "expression": "amount > 100"},
        {"type": "mask", "columns": ["email"], "method": "hash",
         "salt": "{{ env_var('TF_TEST_MASK_SALT') }}"},
        {"type": "rename", "columns": {"order_id": "id"}},
        {"type": "drop", "columns": ["card", "quantity"]},
    ]  # fmt: skip
    env = make_env(orders.name, metadata_columns=[], transforms=transforms)
    orders.produce(("o1", "a@x", "4111", "leave at door", "PAID", 10.0, 1))
    apply(spark, env)
    columns = ["id", "email", "notes", "status", "amount", "big"]
    assert [f.name for f in env.pyiceberg_table().schema().fields] == columns

    client = SchemaRegistryClient({"url": schema_registry.url})
    v2 = AvroSerializer(client, json.dumps(ORDER_SCHEMA_V2))
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    context = SerializationContext(orders.name, MessageField.VALUE)
    for order_id, status, amount in [("o2", "PAID", 500.0), ("o3", "PLACED", 5.0)]:
        value = {"order_id": order_id, "email": f"{order_id}@x", "card": "5500",
                 "status": status, "amount": amount, "quantity": 1}  # fmt: skip
        producer.produce(orders.name, v2(value, context), partition=0)
    producer.flush(30)

    plan = PlanTask(env.project, env.project.tables).run()
    assert not plan.blockers, plan.blockers
    (evolve,) = [a for a in plan.actions if a.kind == "evolve_schema"]
    assert [(c.kind, c.path) for c in evolve.changes] == [("keep_column", "notes")]
    second = apply(spark, env)
    assert second.records_written == 2
    table = env.pyiceberg_table()
    assert [f.name for f in table.schema().fields] == columns
    assert not table.schema().find_field("notes").required
    landed = rows(env)
    assert {k: (r["notes"], r["big"], r["email"]) for k, r in landed.items()} == {
        "o1": ("leave at door", False, hashed("a@x")),
        "o2": (None, True, hashed("o2@x")),
        "o3": (None, False, hashed("o3@x")),
    }
    # converged: the next plan has nothing to change
    again = PlanTask(env.project, env.project.tables).run()
    assert [a.kind for a in again.actions if a.kind != "ingest"] == []

    # v3 drops `quantity`, which a transform names: that transform cannot run as written,
    # a plan error at its file:line (never a silent guess at the field's values)
    v3_schema = {**ORDER_SCHEMA_V2, "fields": [
        f for f in ORDER_SCHEMA_V2["fields"] if f["name"] != "quantity"]}  # fmt: skip
    v3 = AvroSerializer(client, json.dumps(v3_schema))
    value = {"order_id": "o4", "email": "d@x", "card": "1", "status": "PAID", "amount": 1.0}
    producer.produce(orders.name, v3(value, context), partition=0)
    producer.flush(30)
    blocked = PlanTask(env.project, env.project.tables).run()
    (blocker,) = blocked.blockers
    assert blocker.key == "transforms[3].columns[1]" and "unknown column 'quantity'" in (
        blocker.message
    )
    assert blocker.location is not None
    file, line = blocker.location.rsplit(":", 1)
    assert "quantity" in Path(file).read_text().splitlines()[int(line) - 1]


def test_a_salt_used_while_decoding_is_in_no_output_result_or_spark_event_log(
    make_env: Any, monkeypatch: pytest.MonkeyPatch, orders: Orders
) -> None:
    """Text columns are masked in the decode tasks, whose serialized function carries the
    salt to the executors: `tableflow apply` (its own process and JVM, Spark's event log
    on) shows it nowhere, and the rows land hashed."""
    import yaml

    from tests.fixtures.apply_env import run_cli_apply

    monkeypatch.setenv("TF_TEST_MASK_SALT", SALT)
    masks = [t for t in TRANSFORMS if t["type"] == "mask"]
    env = make_env(orders.name, metadata_columns=[], transforms=masks)
    events = env.root / "spark-events"
    events.mkdir()
    project_file = env.root / "tableflow_project.yml"
    project = yaml.safe_load(project_file.read_text())
    project["targets"]["test"]["spark"] = {
        "conf": {"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri()}
    }
    project_file.write_text(yaml.safe_dump(project, sort_keys=False))
    orders.produce(
        ("o1", "alice@example.com", "4111111111111111", "ring the bell", "PAID", 10.0, 1),
        ("o2", "bob@example.com", "5500000000000004", None, "PAID", 5.0, 2),
    )
    output = run_cli_apply(env, None)
    landed = {r["order_id"]: r for r in env.pyiceberg_table().scan().to_arrow().to_pylist()}
    assert landed["o1"]["email"] == hashed("alice@example.com")
    assert landed["o2"]["card"] == "************0004" and landed["o2"]["notes"] is None
    logs = [p for p in events.rglob("*") if p.is_file()]
    assert logs and any(b"PythonMapInArrow" in p.read_bytes() for p in logs)
    # Every step ran while decoding: no transform projection or observation in Spark,
    # and the rows in and out are the decoded rows.
    assert not any(b"tableflow_transforms_" in p.read_bytes() for p in logs)
    assert run_results(env)["transforms"] == {
        "rows_in": 2, "rows_out": 2, "filtered": 0, "duplicates": 0, "rejected": 0,
        "already_in_table": 0,
    }  # fmt: skip
    written = [p for p in (env.root / "target").rglob("*") if p.is_file()]
    for path in [*logs, *written]:
        assert SALT.encode() not in path.read_bytes(), path
    assert SALT not in output
