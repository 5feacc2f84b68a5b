"""An append table's dedup in the read tasks (pipeline/transforms/read_task_dedup.py), end to end:
real broker, registry, catalog server and Spark, through plan + apply; the table read
back by pyiceberg. Each Kafka partition is read by its own task here, so a key in both
partitions is a key two tasks kept: the run is written again with the shuffle dedup."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tableflow_core.deadletter.accounting import RunAccounting
from tableflow_core.pipeline.runners import read_ranges
from tableflow_core.pipeline.transforms.read_task_dedup import (
    DEDUP_RAN_IN_PROPERTY,
    KEYS_ACROSS_TASKS_PROPERTY,
)
from tests.dedup_events import EventTopic
from tests.fixtures.apply_env import Env, apply
from tests.fixtures.stack import KafkaBroker

pytestmark = pytest.mark.slow


class Events(EventTopic):
    def __init__(self, broker: KafkaBroker, registry_url: str) -> None:
        super().__init__(broker, registry_url, "dedup-tasks", 2)

    def produce(self, *events: tuple[int, int, str]) -> None:
        """(partition, id, v) each."""
        self.send(events)


@pytest.fixture
def events(
    kafka_broker: KafkaBroker, schema_registry: Any, monkeypatch: pytest.MonkeyPatch
) -> Events:
    """A two-partition topic; each partition is read by a read task of its own."""
    monkeypatch.setattr(read_ranges, "MIN_RECORDS_PER_TASK", 1)
    return Events(kafka_broker, schema_registry.url)


def table_rows(env: Env) -> dict[int, str]:
    """The table by id (no id twice)."""
    rows = env.pyiceberg_table().scan().to_arrow().to_pylist()
    by_id = {r["id"]: r["v"] for r in rows}
    assert len(by_id) == len(rows), sorted(r["id"] for r in rows)
    return by_id


def summary(env: Env) -> dict[str, str]:
    return dict(env.pyiceberg_table().current_snapshot().summary.additional_properties)


def filtered_by_partition(env: Env) -> dict[int, int]:
    """The published run's accounting (deadletter/accounting.py), `filtered` per partition."""
    accounting = RunAccounting.from_snapshot_summary(summary(env), "t")
    assert accounting is not None
    return {p.partition: p.filtered for p in accounting.partitions}


def test_dedup_runs_in_the_read_tasks_and_falls_back_to_the_shuffle_when_a_key_spans_tasks(
    spark: Any, make_env: Any, events: Events
) -> None:
    env = make_env(events.name, metadata_columns=[],
                   transforms=[{"type": "dedup", "keys": ["id"], "keep": "last"}])  # fmt: skip

    # 1. repeats within each partition only: the read tasks' dedup is exact
    events.produce((0, 1, "a"), (0, 2, "b"), (0, 1, "c"), (1, 3, "d"), (1, 3, "e"))
    first = apply(spark, env)
    assert table_rows(env) == {1: "c", 2: "b", 3: "e"}
    assert first.transforms is not None and first.transforms["duplicates"] == 2
    assert first.transforms["rows_in"] == 5 and first.transforms["rows_out"] == 3
    assert first.records_read == 5 and first.records_written == 3
    assert not [w for w in first.warnings if "read task" in w]
    assert summary(env)[DEDUP_RAN_IN_PROPERTY] == "read tasks"
    assert summary(env)[KEYS_ACROSS_TASKS_PROPERTY] == "0"
    assert filtered_by_partition(env) == {0: 1, 1: 1}

    # 2. key 4 in both partitions: two tasks kept it; the run is written again with the
    # shuffle, and the last by (partition, offset) wins; nothing is published twice
    events.produce((0, 4, "f"), (0, 5, "g"), (1, 4, "h"))
    second = apply(spark, env)
    assert table_rows(env) == {1: "c", 2: "b", 3: "e", 4: "h", 5: "g"}
    assert second.transforms is not None and second.transforms["duplicates"] == 1
    assert second.records_read == 3 and second.records_written == 2
    assert second.offsets_after == {0: 5, 1: 3}
    (redone,) = [w for w in second.warnings if "read task" in w]
    assert "1 dedup key(s)" in redone and "written again" in redone
    assert summary(env)[DEDUP_RAN_IN_PROPERTY] == "shuffle"
    assert summary(env)[KEYS_ACROSS_TASKS_PROPERTY] == "1"
    assert filtered_by_partition(env) == {0: 1, 1: 0}
    table = env.pyiceberg_table()
    assert set(table.metadata.refs) == {"main"}  # the dropped attempt left no branch

    # a run of one task (one partition to read) goes to the shuffle too, and cannot see a
    # key across tasks: it records no count, so the next run still goes by run 2
    events.produce((0, 10, "x"))
    apply(spark, env)
    assert summary(env)[DEDUP_RAN_IN_PROPERTY] == "shuffle"
    assert KEYS_ACROSS_TASKS_PROPERTY not in summary(env)

    # 3. the last run that could see keys across tasks did: this one goes to the shuffle
    # at once (and still reports: none across tasks now); a replayed key stays out
    # (insert-if-absent)
    events.produce((0, 6, "i"), (0, 6, "j"), (1, 7, "k"), (1, 1, "replay"))
    third = apply(spark, env)
    assert not [w for w in third.warnings if "read task" in w]
    assert summary(env)[DEDUP_RAN_IN_PROPERTY] == "shuffle"
    assert summary(env)[KEYS_ACROSS_TASKS_PROPERTY] == "0"
    assert third.transforms is not None and third.transforms["already_in_table"] == 1
    assert table_rows(env) == {1: "c", 2: "b", 3: "e", 4: "h", 5: "g", 6: "j", 7: "k", 10: "x"}

    # 4. ... so the next run dedups in the read tasks again
    events.produce((0, 8, "l"), (0, 8, "m"), (1, 9, "n"))
    fourth = apply(spark, env)
    assert summary(env)[DEDUP_RAN_IN_PROPERTY] == "read tasks"
    assert fourth.transforms is not None and fourth.transforms["duplicates"] == 1
    rows = table_rows(env)
    assert rows[8] == "m" and rows[9] == "n" and len(rows) == 10


def check_results(env: Env) -> dict[str, dict[str, Any]]:
    document = json.loads((env.root / "target" / "run_results.json").read_text())
    (table,) = document["tables"]
    return {c["name"]: c for c in table["checks"]["checks"]}


def test_a_unique_check_the_read_tasks_prove_needs_no_window_and_a_repeat_still_fails_it(
    spark: Any, make_env: Any, events: Events
) -> None:
    checks = [{"type": "unique", "columns": ["id"]},
              {"type": "unique", "columns": ["v"], "severity": "warn"}]  # fmt: skip
    env = make_env(events.name, metadata_columns=[], checks=checks)

    events.produce((0, 1, "a"), (0, 2, "b"), (1, 3, "c"), (1, 4, "a"))
    apply(spark, env)
    results = check_results(env)
    proven = results["unique(id)"]
    assert proven["outcome"] == "pass" and proven["failing"] == 0
    assert "read tasks' key digests" in proven["detail"]
    # "a" is in both partitions: nothing proven, the window counts its rows
    assert results["unique(v)"]["outcome"] == "warn" and results["unique(v)"]["failing"] == 2
    assert results["unique(v)"]["detail"] is None

    # id 5 read by both tasks: the check fails, with the exact count, nothing is published
    events.produce((0, 5, "d"), (1, 5, "e"), (1, 6, "f"))
    failed = apply(spark, env, expect="error")
    assert failed.error is not None
    assert "unique(id) [error] fail: 2 of 3 rows failing" in failed.error
    assert table_rows(env) == {1: "a", 2: "b", 3: "c", 4: "a"}
