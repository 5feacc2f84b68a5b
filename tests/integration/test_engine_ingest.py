"""End to end: real Apache Kafka, real registry, real Spark + Iceberg runtime, REST catalog.

One topic of 100k Avro records over 4 partitions is produced once and shared.
Results are read back with pyiceberg and DuckDB (independent readers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.apply_env import Env, PaymentTopics, apply, apply_ddl_only, run_cli_apply
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer
from tests.unit.test_engine_helpers import duckdb_connection

pytestmark = pytest.mark.slow
RECORDS = 100_000
PARTITIONS = 4


def payment(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"n{i % 97}", "amount": (i % 1000) / 4}


EXPECTED_ID_SUM = RECORDS * (RECORDS - 1) // 2
EXPECTED_AMOUNT_SUM = sum((i % 1000) / 4 for i in range(RECORDS))


@pytest.fixture(scope="module")
def big_topic(kafka_broker: KafkaBroker, schema_registry: SchemaRegistryServer) -> str:
    return PaymentTopics(kafka_broker, schema_registry).create(
        "payments", [payment(i) for i in range(RECORDS)], PARTITIONS
    )


def read_back(env: Env) -> tuple[int, int, float, int]:
    """(rows, sum(id), sum(amount), distinct ids) by pyiceberg, checked against DuckDB."""
    table = env.pyiceberg_table()
    arrow = table.scan().to_arrow()
    by_pyiceberg = (
        arrow.num_rows,
        sum(arrow["id"].to_pylist()),
        round(sum(arrow["amount"].to_pylist()), 3),
        len(set(arrow["id"].to_pylist())),
    )
    con = duckdb_connection()
    rows, ids, amount, distinct = con.execute(
        "SELECT count(*), coalesce(sum(id), 0), coalesce(sum(amount), 0), count(DISTINCT id) "
        f"FROM iceberg_scan('{table.metadata_location}')"
    ).fetchone()  # type: ignore[misc]
    assert (rows, ids, round(amount, 3), distinct) == by_pyiceberg
    return by_pyiceberg


def test_100k_records_land_exactly_once(spark: Any, make_env: Any, big_topic: str) -> None:
    env = make_env(big_topic)
    first = apply(spark, env)
    assert first.records_written == RECORDS and first.records_read == RECORDS
    assert first.offsets_after == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
    assert read_back(env) == (
        RECORDS,
        EXPECTED_ID_SUM,
        round(EXPECTED_AMOUNT_SUM, 3),
        RECORDS,
    )
    again = apply(spark, env)
    assert again.status == "no_changes" and again.records_written == 0
    assert read_back(env)[0] == RECORDS


def test_sigkill_before_and_after_commit_then_rerun(
    spark: Any, make_env: Any, big_topic: str
) -> None:
    env = make_env(big_topic, max_records_per_run=40_000)
    apply_ddl_only(spark, env)
    run_cli_apply(env, crash_at="before_commit")
    assert read_back(env)[0] == 0  # the branch write is invisible on main
    run_cli_apply(env, crash_at="after_commit")
    assert read_back(env)[0] == 40_000  # committed just before the kill
    env.configure()
    outcome = apply(spark, env)
    assert outcome.records_written == RECORDS - 40_000
    assert read_back(env) == (
        RECORDS,
        EXPECTED_ID_SUM,
        round(EXPECTED_AMOUNT_SUM, 3),
        RECORDS,
    )
    refs = spark.sql(f"SELECT name FROM {env.spec().identifier}.refs").collect()
    assert [r.name for r in refs if r.name != "main"] == []  # crashed runs' branches cleaned up


def test_bad_records_fail_the_run_naming_the_offset(
    spark: Any, make_env: Any, payment_topics: PaymentTopics
) -> None:
    from tests.unit.test_engine_helpers import produce_raw

    topic = payments_topic(payment_topics, "bad", 5, 1)
    produce_raw(
        payment_topics.broker.bootstrap, topic, [b"\x07not-avro", b"\x00\x00\x0f\x42\x3fxx"]
    )
    env = make_env(topic)
    failed = apply(spark, env, expect="error")
    message = failed.error or ""
    assert "IngestError" in message and "2 record(s) could not be decoded" in message
    assert f"topic {topic!r} partition 0 offset 5" in message
    assert f"topic {topic!r} partition 0 offset 6" in message
    assert read_back(env)[0] == 0


def test_bad_records_travel_as_data(
    spark: Any, make_env: Any, payment_topics: PaymentTopics
) -> None:
    """The engine's error carries the failed records; its message is not parsed back."""
    from tableflow_core.kafka.offsets import OffsetRange
    from tableflow_core.pipeline.run import IngestError, ingest
    from tableflow_core.targets.catalog import open_catalog
    from tests.unit.test_engine_helpers import produce_raw

    topic = payments_topic(payment_topics, "bad", 4, 2)
    produce_raw(payment_topics.broker.bootstrap, topic, [b"junk"], partition=1)
    env = make_env(topic)
    apply_ddl_only(spark, env)
    ranges = [OffsetRange(topic, 0, 0, 2), OffsetRange(topic, 1, 0, 3)]
    with open_catalog(env.project) as handle, pytest.raises(IngestError) as caught:
        ingest(
            spark,
            env.spec(),
            ranges,
            {"bootstrap.servers": payment_topics.broker.bootstrap},
            {},
            catalog=handle,
        )
    assert [(f.partition, f.offset) for f in caught.value.failures] == [(1, 2)]
    # b"junk" is 4 bytes: shorter than the Confluent header (the decoder's own words)
    assert "shorter than the 5-byte Confluent header" in caught.value.failures[0].reason


def test_schema_v2_adds_a_column(spark: Any, make_env: Any, payment_topics: PaymentTopics) -> None:
    topic = payments_topic(payment_topics, "evolve", 10, 2)
    env = make_env(topic)
    apply(spark, env)
    v2_records = [{**payment(i), "country": f"c{i}"} for i in range(10, 16)]
    payment_topics.produce(topic, v2_records, 2, version=2)
    outcome = apply(spark, env)  # plans v2: evolve_schema then ingest
    assert outcome.records_written == 6
    assert any(d.startswith("evolve_schema") for d in outcome.ddl)
    arrow = env.pyiceberg_table().scan().to_arrow()
    rows = {r["id"]: r["country"] for r in arrow.to_pylist()}
    assert rows == {i: (f"c{i}" if i >= 10 else None) for i in range(16)}
    assert arrow.schema.names[-1] == "country"  # added after the existing columns
    assert set(arrow["_kafka_topic"].to_pylist()) == {topic}
    assert sorted(arrow["_kafka_offset"].to_pylist()) == sorted([*range(8), *range(8)])
    assert "__tf_partition" not in arrow.schema.names  # hidden columns never land


def test_offsets_survive_compaction_and_expiry(
    spark: Any, make_env: Any, payment_topics: PaymentTopics
) -> None:
    from datetime import UTC, datetime

    from tableflow_core.config.models.maintenance import CompactSettings, ExpireSnapshotsSettings
    from tableflow_core.maintenance.operations import compact, expire_snapshots
    from tableflow_core.maintenance.target import SparkTable
    from tableflow_core.state.offsets import read_committed_offsets
    from tableflow_core.state.table_state import read_table_state

    topic = payments_topic(payment_topics, "maint", 10, 2)
    env = make_env(topic)
    apply(spark, env)
    payment_topics.produce(topic, [payment(i) for i in range(10, 20)], 2)
    apply(spark, env)  # two commits -> several small files
    spec = env.spec()
    table_ref = SparkTable.parse(spec.identifier)
    compact(spark, table_ref, CompactSettings(min_input_files=2), datetime.now(UTC))
    state = read_table_state(spark, spec.identifier)
    current = next(s for s in state.snapshots if s.snapshot_id == state.current_snapshot_id)
    assert (
        current.summary.get("operation") in (None, "replace")
        and "tableflow.offsets" not in current.summary
    )
    assert state.committed_offsets(topic).offsets == {0: 10, 1: 10}  # type: ignore[union-attr]

    expire_snapshots(
        spark,
        table_ref,
        ExpireSnapshotsSettings(older_than="0s", retain_last=1),
        datetime(2999, 1, 1, tzinfo=UTC),
    )
    state = read_table_state(spark, spec.identifier)
    assert len(state.snapshots) == 1
    found = state.committed_offsets(topic)
    assert found is not None and found.source == "property" and found.offsets == {0: 10, 1: 10}
    table = env.pyiceberg_table()
    assert read_committed_offsets(table, topic).offsets == {0: 10, 1: 10}  # type: ignore[union-attr]

    payment_topics.produce(topic, [payment(i) for i in range(20, 24)], 2)
    assert apply(spark, env).records_written == 4
    rows, ids, _, distinct = read_back(env)
    assert (rows, ids, distinct) == (24, sum(range(24)), 24)


def payments_topic(topics: PaymentTopics, name: str, count: int, partitions: int) -> str:
    """A new topic of `partitions` holding payments 0..count-1 (Avro, registered)."""
    return topics.create(name, [payment(i) for i in range(count)], partitions)


def run_branches(env: Env) -> list[str]:
    return [name for name in env.pyiceberg_table().metadata.refs if name != "main"]


def commits(env: Env) -> int:
    """Catalog commits of the table so far: one metadata file each (the metadata log)."""
    return len(env.pyiceberg_table().metadata.metadata_log)


def two_runs(
    spark: Any, make_env: Any, payment_topics: PaymentTopics, name: str
) -> tuple[Env, Any, int, int]:
    """Ten payments into a new table, applied; four more, applied: the env, the first
    run's result and the catalog commits of each run. Both runs are checked to land all
    14 records, leave no run branch, and read back whole."""
    topic = payments_topic(payment_topics, name, 10, 2)
    env = make_env(topic)
    apply_ddl_only(spark, env)
    created = commits(env)
    first = apply(spark, env)
    first_commits = commits(env) - created
    payment_topics.produce(topic, [payment(i) for i in range(10, 14)], 2)
    before = commits(env)
    assert apply(spark, env).records_written == 4
    second_commits = commits(env) - before
    assert run_branches(env) == []
    assert read_back(env) == (
        14,
        sum(range(14)),
        round(sum(payment(i)["amount"] for i in range(14)), 3),
        14,
    )
    return env, first, first_commits, second_commits


def test_a_run_is_three_catalog_commits(
    spark: Any,
    make_env: Any,
    payment_topics: PaymentTopics,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Branch (+ a new table's first snapshot), data, publish (accounting + main + drop):
    a run in a Spark job of its own, with Spark's Iceberg writer."""
    import tableflow_core.plan.dag as dag

    # Spark's Iceberg writer, as for a table that needs it (a plain append would not).
    monkeypatch.setattr(dag, "needs_spark_writer", lambda _spec: "the test keeps Spark's writer")
    env, first, first_commits, second_commits = two_runs(spark, make_env, payment_topics, "commits")
    assert first.records_written == 10
    assert first_commits == 3  # was 6: main, branch, data, accounting, ff, drop
    assert second_commits == 3  # was 5
    table = env.pyiceberg_table()
    head = table.metadata.snapshot_by_id(table.metadata.current_snapshot_id)
    assert head is not None
    assert {"tableflow.offsets", "tableflow.accounting"} <= set(head.summary.additional_properties)


def test_a_lone_small_run_is_one_catalog_commit(
    spark: Any, make_env: Any, payment_topics: PaymentTopics
) -> None:
    """A plain append run writes its data files in its read tasks (ingest/sharing.py), and
    one commit cuts the branch, adds them with the offsets and moves main; a new table's
    first run adds the commit of its first snapshot."""
    _, first, first_commits, second_commits = two_runs(spark, make_env, payment_topics, "lone")
    assert first.records_written == 10 and "shared_job" in (first.timings or {})
    assert first_commits == 2  # the first snapshot + branch, the publish
    assert second_commits == 1


def test_a_concurrent_commit_makes_the_run_refuse(
    spark: Any,
    make_env: Any,
    payment_topics: PaymentTopics,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tableflow_core.pipeline.runners.publish as publish_module
    from tableflow_core.kafka.offsets import OffsetRange
    from tableflow_core.pipeline.run import ConcurrentCommitError, ingest
    from tableflow_core.targets.catalog import open_catalog

    topic = payments_topic(payment_topics, "race", 6, 1)
    env = make_env(topic, max_records_per_run=3)
    apply(spark, env)  # commits offsets {0: 3}
    spec = env.spec()
    conf = {"bootstrap.servers": payment_topics.broker.bootstrap}
    with open_catalog(env.project) as handle:
        # planned from stale offsets: refused before anything is read
        with pytest.raises(ConcurrentCommitError, match="changed since the plan"):
            ingest(spark, spec, [OffsetRange(topic, 0, 0, 6)], conf, {}, catalog=handle)
        # another run commits {0: 6} after this run's publish checked main, before its
        # commit: the catalog refuses the commit (main moved), the retry finds the
        # other run's offsets and refuses as a stale plan; nothing of this run is visible
        others: list[str] = []

        def another_run_publishes(name: str) -> None:
            if name == "before_commit" and not others:
                others.append("running")
                apply(spark, env)

        monkeypatch.setattr(publish_module, "crash_point", another_run_publishes)
        with pytest.raises(ConcurrentCommitError, match="changed since the plan"):
            ingest(spark, spec, [OffsetRange(topic, 0, 3, 6)], conf, {0: 3}, catalog=handle)
    assert others == ["running"]
    rows, ids, _, distinct = read_back(env)
    assert (rows, ids, distinct) == (6, sum(range(6)), 6)
    assert run_branches(env) == []


def test_main_moving_at_every_publish_is_refused_and_nothing_is_published(
    spark: Any,
    make_env: Any,
    payment_topics: PaymentTopics,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The publish's concurrency guard: main moves between the write and the publish
    (after the publish's own check), three times: MainMovedError, main keeps the old data
    and offsets, no branch is left."""
    import tableflow_core.pipeline.runners.publish as publish_module
    from tableflow_core.kafka.offsets import OffsetRange
    from tableflow_core.pipeline.run import MainMovedError, ingest
    from tableflow_core.state.offsets import read_committed_offsets
    from tableflow_core.targets.catalog import open_catalog

    topic = payments_topic(payment_topics, "moved", 6, 1)
    env = make_env(topic, max_records_per_run=3)
    apply(spark, env)  # offsets {0: 3}
    spec = env.spec()
    moves: list[int] = []

    def main_moves(name: str) -> None:
        if name == "before_commit":  # a metadata-only commit on main (no offsets)
            table = env.pyiceberg_table()
            table.append(table.schema().as_arrow().empty_table())
            moves.append(table.metadata.current_snapshot_id)

    monkeypatch.setattr(publish_module, "crash_point", main_moves)
    with open_catalog(env.project) as handle, pytest.raises(MainMovedError, match="another commit"):
        ingest(
            spark,
            spec,
            [OffsetRange(topic, 0, 3, 6)],
            {"bootstrap.servers": payment_topics.broker.bootstrap},
            {0: 3},
            catalog=handle,
        )
    assert len(moves) == 3  # every attempt reached its commit and was refused
    table = env.pyiceberg_table()
    assert table.metadata.current_snapshot_id == moves[-1]
    assert read_committed_offsets(table, topic).offsets == {0: 3}  # type: ignore[union-attr]
    rows, ids, _, _ = read_back(env)
    assert (rows, ids) == (3, sum(range(3)))
    assert run_branches(env) == []


def a_compaction(spark: Any) -> Callable[[Any], None]:
    """Moves main the way maintenance does: a real compaction of the env's table
    (`rewrite_data_files`, every file; a replace snapshot, no row or offset changed)."""

    def compact(env: Any) -> None:
        spec = env.spec()
        table_arg = spec.identifier.replace("'", "\\'")
        spark.sql(
            f"CALL {spec.catalog}.system.rewrite_data_files(table => '{table_arg}', "
            "options => map('rewrite-all', 'true'))"
        )

    return compact


def an_empty_append(env: Any) -> None:
    """Moves main by a commit that is no compaction: an append of no rows (no offsets)."""
    table = env.pyiceberg_table()
    table.append(table.schema().as_arrow().empty_table())


def apply_with_main_moved_first(
    spark: Any,
    make_env: Any,
    payment_topics: PaymentTopics,
    monkeypatch: pytest.MonkeyPatch,
    patched_module: Any,
    name: str,
    move_main: Callable[[Any], None],
) -> tuple[Any, Any, int]:
    """8 records, a first apply of 4, then a second apply whose first commit finds that
    `move_main(env)` moved main (run in place of `patched_module.crash_point` at the
    first `before_commit`): (env, the second apply's outcome, how often main was moved)."""
    topic = payment_topics.create(name, [payment(i) for i in range(8)], 1)
    env = make_env(topic, max_records_per_run=4)
    apply(spark, env)  # 4 rows, offsets {0: 4}
    moves: list[str] = []

    def main_moves_first(point: str) -> None:
        if point == "before_commit" and not moves:
            move_main(env)
            moves.append(point)

    monkeypatch.setattr(patched_module, "crash_point", main_moves_first)
    return env, apply(spark, env), len(moves)


def assert_every_record_once_and_nothing_left(
    spark: Any, env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 8 records in the table once each; a further apply, main no longer moved, finds
    the offsets after them (writes nothing), and no run branch is left."""
    rows, id_sum, _, distinct = read_back(env)
    assert (rows, distinct, id_sum) == (8, 8, sum(payment(i)["id"] for i in range(8)))
    monkeypatch.undo()
    assert apply(spark, env).records_written == 0
    assert run_branches(env) == []


def test_a_compaction_before_a_read_task_runs_publish_is_published_on_top_of_it_once(
    spark: Any,
    make_env: Any,
    payment_topics: PaymentTopics,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plain append run (its read tasks write, one commit) whose publish finds that a real
    compaction moved main (replace snapshots only: no row, no offset changed) is published
    on top of it, once, never half-published: every record once, the offsets after it."""
    import tableflow_core.pipeline.shared_run as shared_run_module

    env, outcome, moves = apply_with_main_moved_first(
        spark, make_env, payment_topics, monkeypatch, shared_run_module,
        "compacted1", a_compaction(spark),
    )  # fmt: skip
    assert moves == 1
    assert outcome.offsets_after == {0: 8}
    assert "publish_rebased" in (outcome.timings or {}), outcome.timings
    assert not any("ran again on its own" in w for w in outcome.warnings), outcome.warnings
    table = env.pyiceberg_table()
    main = table.current_snapshot()
    parent = table.snapshot_by_id(main.parent_snapshot_id)
    ops = [s.summary.operation.value for s in (parent, main)]
    assert ops == ["replace", "append"], ops  # the publish is the compaction's child
    assert_every_record_once_and_nothing_left(spark, env, monkeypatch)


def test_another_commit_before_a_read_task_runs_publish_runs_it_again_exactly_once(
    spark: Any,
    make_env: Any,
    payment_topics: PaymentTopics,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same run whose publish finds main moved by an append (a commit that is no
    compaction: it is not published on top of it) is refused by the catalog and runs again
    on its own: every record once, the offsets found after it."""
    import tableflow_core.pipeline.shared_run as shared_run_module

    env, outcome, moves = apply_with_main_moved_first(
        spark, make_env, payment_topics, monkeypatch, shared_run_module,
        "appended1", an_empty_append,
    )  # fmt: skip
    assert moves == 1
    assert outcome.offsets_after == {0: 8}
    assert any("ran again on its own" in w for w in outcome.warnings), outcome.warnings
    assert "publish_rebased" not in (outcome.timings or {})
    assert_every_record_once_and_nothing_left(spark, env, monkeypatch)


def test_a_compaction_during_the_write_is_retried_exactly_once(
    spark: Any,
    make_env: Any,
    payment_topics: PaymentTopics,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tableflow_core.pipeline.runners.publish as publish_module
    import tableflow_core.plan.dag as dag

    # Spark's Iceberg writer (a run whose read tasks write, found main moved, runs again).
    monkeypatch.setattr(dag, "needs_spark_writer", lambda _spec: "the test keeps Spark's writer")
    # The first publish finds that a real compaction moved main after the branch was cut
    # and after its own check (a replace snapshot: data and committed offsets unchanged):
    # the catalog refuses the commit, the run retries.
    env, outcome, moves = apply_with_main_moved_first(
        spark, make_env, payment_topics, monkeypatch, publish_module, "compacted",
        a_compaction(spark),
    )  # fmt: skip
    assert moves == 1
    assert outcome.offsets_after == {0: 8}
    assert any("commit retried 1 time(s)" in w for w in outcome.warnings)
    # The offsets were found after the retry: a further apply writes nothing.
    assert_every_record_once_and_nothing_left(spark, env, monkeypatch)
