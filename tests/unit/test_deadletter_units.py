"""Dead-letter building blocks without servers: config, accounting, headers, plan actions."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tableflow_core.config.errors import ConfigError
from tableflow_core.config.loader import load_project
from tableflow_core.config.models.dead_letter import IcebergDeadLetter, KafkaDeadLetter
from tableflow_core.deadletter.accounting import (
    ACCOUNTING_KEY,
    PartitionAccount,
    RunAccounting,
    merge_accounts,
)
from tableflow_core.deadletter.errors import AccountingError, OriginalRecordMissingError
from tableflow_core.deadletter.frames import spark_error_summary
from tableflow_core.deadletter.headers import (
    DEDUP_HEADERS,
    SOURCE_OFFSET,
    dead_letter_headers,
    decode_error_headers,
)
from tableflow_core.deadletter.originals import offset_spans, originals_for_rows
from tableflow_core.deadletter.policy import policy_for
from tableflow_core.deadletter.sinks import SinkResult, counts_by_outcome
from tableflow_core.deadletter.suspension import (
    SUSPENDED_PROPERTY,
    Suspension,
    describe_suspension,
    read_suspension,
)
from tableflow_core.ingest.bad_records import BAD_RECORD_SCHEMA
from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.plan.dead_letter_table import dlq_table_actions, is_dlq_action

PROJECT = """\
name: demo
targets:
  dev:
    kafka:
      bootstrap_servers: "127.0.0.1:9999"
defaults:
  namespace: shop
  value: {format: json}
"""


def load(tmp_path: Path, tables: str, project: str = PROJECT) -> object:
    (tmp_path / "tableflow_project.yml").write_text(project)
    (tmp_path / "tables").mkdir(exist_ok=True)
    (tmp_path / "tables" / "t.yml").write_text(tables)
    return load_project(tmp_path)


def problems(tmp_path: Path, tables: str, project: str = PROJECT) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, tables, project)
    return [p.render(tmp_path) for p in info.value.problems]


# ------------------------------------------------------------------ config


def test_dlq_without_target_is_a_located_error(tmp_path: Path) -> None:
    found = problems(tmp_path, "tables:\n  - name: a\n    topic: a\n    on_error: dlq\n")
    assert len(found) == 1
    assert found[0].startswith("tables/t.yml:4") and "no `dlq` target is set" in found[0]


def test_check_routing_to_dlq_needs_a_target(tmp_path: Path) -> None:
    tables = (
        "tables:\n  - name: a\n    topic: a\n    checks:\n"
        "      - {type: not_null, columns: [id], on_failure: dlq}\n"
    )
    found = problems(tmp_path, tables)
    assert len(found) == 1 and found[0].startswith("tables/t.yml:4") and "checks" in found[0]


def test_defaults_dlq_is_inherited_and_required(tmp_path: Path) -> None:
    with_default = PROJECT + "  on_error: dlq\n  dlq: {type: iceberg, table: ops.bad_records}\n"
    project = load(tmp_path, "tables:\n  - name: a\n    topic: a\n", with_default)
    table = project.tables[0]  # type: ignore[attr-defined]
    assert table.on_error == "dlq"
    assert table.dlq == IcebergDeadLetter(type="iceberg", table="ops.bad_records")
    found = problems(tmp_path, "tables: []\n", PROJECT + "  on_error: dlq\n")
    assert (
        len(found) == 1 and "defaults.on_error dlq needs a default dead-letter target" in found[0]
    )


@pytest.mark.parametrize(
    ("dlq", "needle"),
    [
        ("{type: kafka, topic: 'bad topic'}", "invalid dead-letter topic name 'bad topic'"),
        ("{type: iceberg, table: nonamespace}", "write it as `namespace.table`"),
    ],
)
def test_dead_letter_names_are_validated(tmp_path: Path, dlq: str, needle: str) -> None:
    tables = f"tables:\n  - name: a\n    topic: a\n    on_error: dlq\n    dlq: {dlq}\n"
    found = problems(tmp_path, tables)
    assert len(found) == 1 and found[0].startswith("tables/t.yml:5 [tables[0].dlq."), found
    assert needle in found[0]


# ------------------------------------------------------------------ accounting


def test_accounting_balances_and_round_trips_through_the_summary() -> None:
    accounting = RunAccounting.from_counts(
        "orders",
        "orders-topic",
        "run-1",
        read={0: 10, 1: 5},
        written={0: 6, 1: 5},
        skipped={0: 1},
        dead_lettered={0: 2},
        filtered={0: 1},
    ).check()
    assert accounting.totals == {
        "read": 15,
        "written": 11,
        "filtered": 1,
        "skipped": 1,
        "dead_lettered": 2,
        "tombstones": 0,
    }
    summary = accounting.snapshot_summary()
    assert set(summary) == {ACCOUNTING_KEY}
    assert json.loads(summary[ACCOUNTING_KEY])["p"]["0"] == [10, 6, 1, 1, 2, 0]
    assert RunAccounting.from_snapshot_summary(summary, "orders") == accounting
    results = accounting.to_json()
    assert results["partitions"][0] == {
        "partition": 0,
        "read": 10,
        "written": 6,
        "filtered": 1,
        "skipped": 1,
        "dead_lettered": 2,
        "tombstones": 0,
    }
    json.dumps(results)  # serialisable as is


def test_accounting_check_names_the_partition_that_lost_records() -> None:
    accounting = RunAccounting.from_counts(
        "orders", "t", "run-2", read={0: 3, 1: 4}, written={0: 3, 1: 2}, dead_lettered={1: 1}
    )
    with pytest.raises(AccountingError) as info:
        accounting.check()
    message = str(info.value)
    assert "partition 1: read 4 != 2 written" in message and "partition 0" not in message
    with pytest.raises(ValueError, match="unknown accounting outcome"):
        RunAccounting.from_counts("o", "t", "r", read={}, lost={0: 1})


def test_partition_accounts_merge_across_tasks() -> None:
    merged = merge_accounts(
        [
            PartitionAccount(1, read=2, written=2),
            PartitionAccount(0, read=3, skipped=3),
            PartitionAccount(1, read=1, dead_lettered=1),
        ]
    )
    assert merged == (
        PartitionAccount(0, read=3, skipped=3),
        PartitionAccount(1, read=3, written=2, dead_lettered=1),
    )
    assert all(p.balanced for p in merged)


# ------------------------------------------------------------------ headers


def test_dead_letter_headers_keep_the_originals_first() -> None:
    row = {
        "source_topic": "orders",
        "source_partition": 2,
        "source_offset": 41,
        "source_timestamp": datetime(2026, 1, 1, tzinfo=UTC),
        "headers": [{"key": "trace", "value": b"\x00\x01"}, {"key": "empty", "value": None}],
        "stage": "decode",
        "error_class": "FramingError",
        "error_message": "wrong magic byte 0x07",
        "run_id": "run-9",
        "failed_at": datetime(2026, 1, 2, tzinfo=UTC),
    }
    headers = dead_letter_headers(row)
    assert headers[:2] == [("trace", b"\x00\x01"), ("empty", None)]
    decoded = decode_error_headers(headers)
    assert decoded[SOURCE_OFFSET] == "41"
    assert [decoded[h] for h in DEDUP_HEADERS] == ["orders", "2", "41", "decode"]
    assert decoded["tableflow.error.source.timestamp"] == "1767225600000"
    assert decoded["tableflow.error.failed.at"] == "2026-01-02T00:00:00+00:00"


# ------------------------------------------------------------------ originals (narrow unit)


def test_offset_spans_group_nearby_offsets() -> None:
    assert offset_spans([7, 3, 4, 3, 200], max_gap=10) == [(3, 8), (200, 201)]
    assert offset_spans([], max_gap=10) == []


def test_originals_for_rows_refuses_a_vanished_record() -> None:
    def reader(conf: object, r: OffsetRange) -> object:
        yield [KafkaMessage(r.topic, r.partition, 5, 1000, b"k", b"v")]

    rejected = [
        {"source_partition": 0, "source_offset": o, "stage": "check", "error_class": "C",
         "error_message": "m"}
        for o in (5, 6)
    ]  # fmt: skip
    rows = originals_for_rows({}, "t", rejected, "r", 0, reader=reader)  # type: ignore[arg-type]
    first = next(rows)
    assert [(r["source_offset"], r["value"], r["source_timestamp"]) for r in first] == [
        (5, b"v", 1_000_000)
    ]
    with pytest.raises(OriginalRecordMissingError, match=r"offset\(s\) \[6\]"):
        next(rows)


# ------------------------------------------------------------------ plan actions and suspension


def test_dlq_table_is_planned_once_for_tables_sharing_it(tmp_path: Path) -> None:
    tables = """\
tables:
  - name: a
    topic: a
    on_error: dlq
    dlq: {type: iceberg, table: ops.bad}
  - name: b
    topic: b
    on_error: dlq
    dlq: {type: iceberg, table: ops.bad}
  - name: c
    topic: c
    on_error: dlq
    dlq: {type: kafka, topic: c-dlq}
"""
    project = load(tmp_path, tables)
    actions, blockers = dlq_table_actions(project.tables, {}, {("shop",)})  # type: ignore[attr-defined]
    assert blockers == []
    assert [a.id for a in actions] == ["create_namespace:ops", "create_dlq_table:ops.bad"]
    create = actions[1]
    assert is_dlq_action(create) and create.table is None  # type: ignore[union-attr]
    assert [c.name for c in create.columns] == BAD_RECORD_SCHEMA.names  # type: ignore[union-attr]
    assert create.properties["tableflow.dead-letter"] == "a,b"  # type: ignore[union-attr]
    # exists with the right columns: nothing to do; with other columns: refused
    done, _ = dlq_table_actions(project.tables, {"ops.bad": BAD_RECORD_SCHEMA.names}, set())  # type: ignore[attr-defined]
    assert done == []
    _, refused = dlq_table_actions(project.tables, {"ops.bad": ["x"]}, set())  # type: ignore[attr-defined]
    assert len(refused) == 1 and refused[0].location == f"{tmp_path}/tables/t.yml:5"
    assert "exists with columns ['x']" in refused[0].message
    assert KafkaDeadLetter(type="kafka", topic="c-dlq") == project.tables[2].dlq  # type: ignore[attr-defined]


def test_dlq_table_may_not_be_a_data_table(tmp_path: Path) -> None:
    tables = """\
tables:
  - name: a
    topic: a
    on_error: dlq
    dlq: {type: iceberg, table: shop.b}
  - name: b
    topic: b
"""
    project = load(tmp_path, tables)
    actions, blockers = dlq_table_actions(project.tables, {}, set())  # type: ignore[attr-defined]
    assert actions == [] and "also the data table of 'b'" in blockers[0].message


def test_suspension_is_read_from_table_properties() -> None:
    suspension = Suspension.now("DecodingError: bad magic byte", "orders", 1, 17, "run-3")
    properties = {"other": "x", SUSPENDED_PROPERTY: suspension.encode()}
    assert read_suspension(properties) == suspension
    text = describe_suspension(properties)
    assert text is not None and "topic 'orders' partition 1 offset 17" in text
    assert "DecodingError: bad magic byte" in text and "run-3" in text
    assert describe_suspension({"other": "x"}) is None
    garbled = read_suspension({SUSPENDED_PROPERTY: "{not json"})
    assert garbled is not None and "unreadable" in garbled.reason


def test_policy_for_prefers_a_checks_own_on_failure(tmp_path: Path) -> None:
    tables = """\
tables:
  - name: a
    topic: a
    on_error: skip
    dlq: {type: kafka, topic: a-dlq}
    checks:
      - {type: not_null, columns: [id], on_failure: dlq}
      - {type: range, column: amount, min: 0}
"""
    table = load(tmp_path, tables).tables[0]  # type: ignore[attr-defined]
    own, inherited = table.checks
    assert policy_for(table, "check", own) == "dlq"
    assert policy_for(table, "check", inherited) == "skip"
    assert policy_for(table, "decode") == policy_for(table, "transform") == "skip"


def test_counts_by_outcome_feed_the_accounting() -> None:
    results = [
        SinkResult("skipped", "skipped", {0: 2}),
        SinkResult("dead_lettered", "kafka topic x", {0: 1, 1: 4}),
        SinkResult("dead_lettered", "kafka topic x", {1: 1}),
    ]
    counts = counts_by_outcome(results)
    assert counts == {"skipped": {0: 2}, "dead_lettered": {0: 1, 1: 5}}
    accounting = RunAccounting.from_counts(
        "a", "t", "r", read={0: 5, 1: 5}, written={0: 2}, **counts
    ).check()
    assert accounting.totals["dead_lettered"] == 6


def test_spark_error_summary_finds_the_root_cause() -> None:
    text = (
        "An error occurred while calling o107.append.\n"
        ": org.apache.iceberg.exceptions.RESTException: Error occurred while processing POST\n"
        "\tat org.apache.iceberg.rest.HTTPClient.execute(HTTPClient.java:1)\n"
        "Caused by: java.net.ConnectException: Connection refused\n"
    )
    assert spark_error_summary(RuntimeError(text)) == (
        "RESTException: Error occurred while processing POST "
        "(caused by ConnectException: Connection refused)"
    )
    assert spark_error_summary(RuntimeError("plain words")) == "plain words"
