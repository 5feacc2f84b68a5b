"""No clear value of a masked column anywhere (issue #27): not in an error message, not
in run_results.json, not in the table property `tableflow.suspended` (metadata served
to every reader), not in a snapshot summary or any metadata file, not in the console
or the catalog's log, not in a dead-letter row.

A JSON Schema topic, produced with confluent-kafka's JSONSerializer and validation off
(a producer that does not check its records), holds four records of one table that
masks `email` (hash), `phone` (hash; an integer) and `card` (partial):

    offset 0: a good record
    offset 1: `phone` is the text "+1-555-0100-77": a decode failure
    offset 2: `card` does not start with digits: a derive's CAST of it fails (rejected)
    offset 3: `id` 500 fails the check `small_id` (on_failure dlq)

Under `tableflow run --once` with on_error fail, the table is suspended; then, with
on_error dlq and an Iceberg dead-letter table (payload masked by default), `apply` lands
offset 0 and dead-letters the rest. Every place the run wrote is searched for each
clear value (and for the bytes of the JSON records).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tableflow_core.deadletter.suspension import SUSPENDED_PROPERTY
from tableflow_core.ingest.bad_records import MASKED_PAYLOAD, PAYLOAD_HEADER
from tests.fixtures.apply_env import CRASH_ENV, REPO, Env, apply, run_cli
from tests.fixtures.catalog import CatalogServer, unique_namespace
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.json_schemas import json_object

pytestmark = pytest.mark.slow

SCHEMA = json_object(
    "Customer",
    id="integer",
    email="string",
    phone="integer",
    card="string",
    required=["id", "email", "phone", "card"],
)
RECORDS = [
    {"id": 1, "email": "ada@example.com", "phone": 15550100, "card": "4111111111111111"},
    {"id": 2, "email": "bob@example.com", "phone": "+1-555-0100-77", "card": "5500000000000004"},
    {"id": 3, "email": "cy@example.com", "phone": 15550102, "card": "x9x4012888888881881"},
    {"id": 500, "email": "di@example.com", "phone": 15550103, "card": "378282246310005"},
]
CLEAR = [str(r[c]) for r in RECORDS for c in ("email", "phone", "card")]
# Substrings a quoted or truncated value would still show.
FRAGMENTS = [*CLEAR, "555-0100-77", "x9x401", "@example.com"]
TRANSFORMS = [
    {"type": "derive", "column": "card_bin", "expression": "CAST(substr(card, 1, 6) AS INT)"},
    {"type": "mask", "columns": ["email", "phone"], "method": "hash",
     "salt": "{{ env_var('TF_TEST_MASK_SALT') }}"},
    {"type": "mask", "columns": ["card"], "method": "partial", "keep_last": 4},
]  # fmt: skip
CHECKS = [{"type": "expression", "name": "small_id", "expression": "id < 100", "on_failure": "dlq"}]


def run_cli_streams(root: Path, *args: str) -> tuple[int, str, str]:
    """A tableflow command in its own process: (exit status, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tableflow_core", "--project-dir", str(root), *args],
        cwd=REPO, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)  # the Spark JVM never outlives the command
    return proc.returncode, stdout, stderr


def clear_values_in(text: str) -> list[str]:
    return [fragment for fragment in FRAGMENTS if fragment in text]


def text_files_with_clear_values(files: list[Path]) -> dict[str, list[str]]:
    """Every uncompressed file (metadata JSON, results, logs) holding a clear value."""
    found = {}
    for path in files:
        if path.suffix in (".parquet", ".avro", ".db"):
            continue  # compressed or binary: read through their readers below
        hits = clear_values_in(path.read_bytes().decode("utf-8", "replace"))
        if hits:
            found[str(path)] = hits
    return found


def produce_customers(
    kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer, records: list[dict[str, Any]]
) -> str:
    """A new topic holding `records` as JSON Schema values of SCHEMA, keyed `c<id>`."""
    topic = kafka_broker.create_topic(unique_name("customers"), 1)
    serialize = JSONSerializer(
        json.dumps(SCHEMA), schema_registry.client(), conf={"validate": False}
    )
    producer = Producer(kafka_broker.producer_config())
    for record in records:
        value = serialize(record, SerializationContext(topic, MessageField.VALUE))
        producer.produce(topic, value, f"c{record['id']}".encode())
    assert producer.flush(10) == 0
    return topic


@pytest.fixture
def customers(kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer) -> str:
    return produce_customers(kafka_broker, schema_registry, RECORDS)


def test_no_clear_value_of_a_masked_column_in_errors_properties_results_or_dead_letters(
    spark: Any,
    make_env: Any,
    customers: str,
    catalog_server: CatalogServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TF_TEST_MASK_SALT", "salt-for-issue-27")
    table = {"value": {"format": "json_schema"}, "metadata_columns": [],
             "transforms": TRANSFORMS, "checks": CHECKS}  # fmt: skip
    dlq = f"{unique_namespace('dlq')}.bad_customers"
    env: Env = make_env(customers, **table, dlq={"type": "iceberg", "table": dlq})

    # 1. on_error fail under `tableflow run`: the decode failure suspends the table
    status, output = run_cli(env.root, "run", "--once")
    assert status == 1 and "suspended" in output, output[-3000:]
    assert "field 'phone'" in output and "masked column" in output, output[-3000:]
    assert clear_values_in(output) == []
    suspended = env.pyiceberg_table().properties[SUSPENDED_PROPERTY]
    assert json.loads(suspended)["offset"] == 1 and "field 'phone'" in suspended
    assert clear_values_in(suspended) == []
    results = (env.root / "target" / "run_results.json").read_text()
    assert "field 'phone'" in results and clear_values_in(results) == []

    # 1b. the same run with JSON log lines (docs/observability.md), the table resumed first
    with env.pyiceberg_table().transaction() as transaction:
        transaction.remove_properties(SUSPENDED_PROPERTY)
    status, stdout, stderr = run_cli_streams(env.root, "run", "--once", "--log-format", "json")
    assert status == 1, stdout[-3000:] + stderr[-3000:]
    events = [json.loads(line) for line in stdout.splitlines()]  # every line is JSON
    failed = [e for e in events if e["event"] == "table_result" and e["level"] == "error"]
    assert len(failed) == 1 and failed[0]["table"] == "t", events
    assert "field 'phone'" in failed[0]["error"] and "masked column" in failed[0]["error"]
    assert any(e["event"] == "table_suspended" for e in events), events
    assert clear_values_in(stdout) == [] and clear_values_in(stderr) == []

    # 2. on_error dlq: offset 0 lands, the others are dead-lettered without their bytes
    env.configure(**table, on_error="dlq", dlq={"type": "iceberg", "table": dlq})
    result = apply(spark, env)
    assert result.accounting is not None
    assert result.accounting["totals"]["written"] == 1
    assert result.accounting["totals"]["dead_lettered"] == 3
    rows = env.pyiceberg_table().scan().to_arrow().to_pylist()
    assert [r["id"] for r in rows] == [1] and rows[0]["card"] == "************1111"
    assert clear_values_in(json.dumps(rows, default=str)) == []

    dead = env.catalog.pyiceberg_catalog().load_table(dlq).scan().to_arrow().to_pylist()
    by_offset = {r["source_offset"]: r for r in dead}
    assert sorted(by_offset) == [1, 2, 3]
    assert (by_offset[1]["stage"], by_offset[2]["stage"], by_offset[3]["stage"]) == (
        "decode", "transform", "check",
    )  # fmt: skip
    for row in dead:
        assert row["key"] is None
        assert {"key": PAYLOAD_HEADER, "value": MASKED_PAYLOAD} in row["headers"]
        assert clear_values_in(row["error_message"]) == []
    assert by_offset[1]["value"] is None  # undecodable: nothing can be masked, nothing kept
    assert "field 'phone'" in by_offset[1]["error_message"]
    assert "masked column" in by_offset[2]["error_message"]
    for offset in (2, 3):  # rows that decoded: JSON, masked columns masked
        landed = json.loads(by_offset[offset]["value"])
        assert landed["id"] == RECORDS[offset]["id"]
        assert landed["card"].endswith(RECORDS[offset]["card"][-4:]) and "*" in landed["card"]
        assert len(landed["email"]) == 64  # a SHA-256 hex digest
    assert clear_values_in(json.dumps(dead, default=repr)) == []

    # 3. nothing else holds one: metadata files (snapshot summaries, properties), results
    namespaces = (env.namespace, dlq.split(".")[0])
    written = [p for p in catalog_server.warehouse.rglob("*")
               if p.is_file() and any(ns in str(p) for ns in namespaces)]  # fmt: skip
    assert any(p.name.endswith(".metadata.json") for p in written)
    written += [p for p in (env.root / "target").rglob("*") if p.is_file()]
    assert text_files_with_clear_values(written) == {}
    log = catalog_server.process.log_file.read_text(errors="replace")
    assert clear_values_in(log) == []
