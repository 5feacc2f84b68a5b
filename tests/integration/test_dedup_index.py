"""An append table's dedup against the table by its key set (pipeline/dedup_index.py), end
to end: real broker, registry, catalog server and Spark, through plan + apply; the table
read back by pyiceberg and DuckDB and compared with a model (each key's first record
lands, wherever the runs split the records). `tableflow run`'s cycles (RunTask) and the
applies share this process: the set stays warm between them; emptying the process's
cache is a restart; a kill -9 is a CLI apply in a process of its own."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tableflow_core.pipeline import dedup_index
from tableflow_core.pipeline.key_index import INDEXES
from tableflow_core.runner.results import TableResult
from tableflow_core.tasks.run import CycleReport, RunTask
from tests.dedup_events import EventTopic
from tests.fixtures.apply_env import Env, apply, run_cli_apply
from tests.fixtures.stack import KafkaBroker
from tests.unit.test_key_index import weak_hash

pytestmark = pytest.mark.slow


class Events(EventTopic):
    def __init__(self, broker: KafkaBroker, registry_url: str) -> None:
        super().__init__(broker, registry_url, "dedup-index", 1)
        self.produced: list[tuple[int, str]] = []

    def produce(self, *events: tuple[int, str]) -> None:
        """(id, v) each, in this order."""
        self.send((None, key, value) for key, value in events)
        self.produced.extend(events)

    def first_of_each(self, key: int) -> dict[Any, tuple[int, str]]:
        """The model: each key's first record (`key`: 0 the id, 1 v)."""
        first: dict[Any, tuple[int, str]] = {}
        for event in self.produced:
            first.setdefault(event[key], event)
        return first


@pytest.fixture
def events(kafka_broker: KafkaBroker, schema_registry: Any) -> Events:
    return Events(kafka_broker, schema_registry.url)


@pytest.fixture(autouse=True)
def cold_cache() -> Iterator[None]:
    INDEXES.clear()
    yield
    INDEXES.clear()


def landed(env: Env) -> set[tuple[int, str]]:
    """The table's rows, read by pyiceberg; DuckDB reads the same ones, none twice."""
    from tableflow_core.readers.duckdb_reader import duckdb_connection

    rows = env.pyiceberg_table().scan().to_arrow().to_pylist()
    by_pyiceberg = sorted((r["id"], r["v"]) for r in rows)
    location = env.pyiceberg_table().metadata_location
    by_duckdb = sorted(
        duckdb_connection().sql(f"SELECT id, v FROM iceberg_scan('{location}')").fetchall()
    )
    assert by_duckdb == by_pyiceberg
    assert len(set(by_pyiceberg)) == len(by_pyiceberg)
    return set(by_pyiceberg)


def ways(results: Sequence[TableResult]) -> list[str]:
    """How each run looked its batch up in the table: "build" (the set built), "warm"
    (the set kept since the last run), "no set" (the anti-join, or an empty table: none)."""
    found = []
    for result in results:
        timings = result.timings or {}
        if "dedup_index_lookup" not in timings:
            found.append("no set")
        else:
            found.append("build" if "dedup_index_build" in timings else "warm")
    return found


def test_the_key_set_stays_warm_across_run_cycles_is_rebuilt_after_a_restart_and_runs_split(
    spark: Any, make_env: Any, events: Events
) -> None:
    env = make_env(events.name, metadata_columns=[], max_records_per_run=3,
                   refresh_interval="1s",
                   transforms=[{"type": "dedup", "keys": ["id"], "keep": "first"}])  # fmt: skip
    # a key's records fall in several runs (3 records each): the first one lands
    events.produce((1, "a"), (2, "b"), (1, "c"), (3, "d"), (2, "e"), (1, "f"), (4, "g"))
    seen: list[TableResult] = []

    def after_cycle(report: CycleReport) -> None:
        assert report.results is not None, report
        seen.extend(report.results.tables)
        if len(seen) == 3:
            events.produce((5, "h"), (4, "i"), (5, "k"))

    project = env.project
    cycles = RunTask(project, project.tables, spark_factory=lambda: spark, max_cycles=4,
                     on_cycle=after_cycle).run()  # fmt: skip
    assert all(c.ok for c in cycles), cycles
    assert ways(seen) == ["no set", "build", "warm", "warm"]  # `tableflow run`'s cycles
    assert [r.records_written for r in seen] == [2, 1, 1, 1]
    assert seen[1].transforms is not None and seen[1].transforms["already_in_table"] == 2
    assert landed(env) == set(events.first_of_each(0).values())

    INDEXES.clear()  # a restart: the next run builds the set from the table
    events.produce((5, "m"), (8, "n"), (1, "o"))
    restarted = apply(spark, env)
    assert ways([restarted]) == ["build"] and restarted.records_written == 1
    assert landed(env) == set(events.first_of_each(0).values())


def test_hash_collisions_send_the_batch_to_the_anti_join(
    spark: Any, make_env: Any, events: Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the key is text; the hash is its length: "bb", "cc" and "dd" share one
    monkeypatch.setattr(dedup_index, "HASHER", weak_hash)
    env = make_env(events.name, metadata_columns=[],
                   transforms=[{"type": "dedup", "keys": ["v"], "keep": "first"}])  # fmt: skip
    events.produce((1, "a"), (2, "bb"))
    apply(spark, env)
    events.produce((3, "ffff"), (4, "a"))
    assert ways([apply(spark, env)]) == ["build"]  # no collision in sight: the set is used
    # two keys of the batch share a hash: that batch is anti-joined
    events.produce((4, "cc"), (5, "dd"), (6, "bb"), (7, "ffff"), (8, "ggg"))
    collided = apply(spark, env)
    assert ways([collided]) == ["no set"] and collided.records_written == 3
    # the table's keys share a hash now: the set is dropped (its advance sees a hash it
    # holds already), built again and refused: anti-joined
    events.produce((9, "cc"), (10, "hhhhh"))
    last = apply(spark, env)
    assert ways([last]) == ["no set"] and last.records_written == 1
    assert landed(env) == set(events.first_of_each(1).values())


def test_a_kill_9_before_the_publish_leaves_the_table_and_the_warm_set_exact(
    spark: Any, make_env: Any, events: Events
) -> None:
    env = make_env(events.name, metadata_columns=[],
                   transforms=[{"type": "dedup", "keys": ["id"], "keep": "first"}])  # fmt: skip
    events.produce((1, "a"), (2, "b"))
    apply(spark, env)
    events.produce((1, "x"), (5, "y"))
    assert ways([apply(spark, env)]) == ["build"]  # warm in this process from here
    # a process of its own builds its set, writes the batch to its branch and dies
    events.produce((2, "c"), (3, "d"), (3, "e"))
    run_cli_apply(env, crash_at="before_commit")
    assert landed(env) == {(1, "a"), (2, "b"), (5, "y")}
    # main did not move: this process's set is still at the run's base; the batch is
    # read again with the next records
    events.produce((4, "f"), (1, "g"))
    again = apply(spark, env)
    assert ways([again]) == ["warm"] and again.records_read == 5
    assert again.records_written == 2
    assert landed(env) == set(events.first_of_each(0).values())
