"""End to end: real noida-db, real registry, real Spark + Iceberg runtime, REST catalog.

One topic of 100k Avro records over 4 partitions is produced once and shared.
Results are read back with pyiceberg and DuckDB (independent readers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tableflow_core.engine.ingest import IngestError, IngestOutcome
from tableflow_core.engine.materialize import materialize
from tableflow_core.engine.spark_session import register_catalog
from tableflow_core.engine.test_hooks import CRASH_ENV
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.schemas.decoding import DecoderSpec, serialize_schema
from tableflow_core.schemas.formats import METADATA_COLUMNS, FormatSpec
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import resolve_schema
from tests.fixtures.catalog import CatalogServer, unique_namespace
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.test_engine_helpers import duckdb_connection, produce_avro

pytestmark = pytest.mark.slow
CATALOG = "tf_engine"
RECORDS = 100_000
PARTITIONS = 4
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Env:
    bootstrap: str
    registry_url: str
    catalog: CatalogServer
    namespace: str

    @property
    def kafka_conf(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap}

    def spec(self, topic: str, **kwargs: Any) -> IngestSpec:
        """A spec decoding the registry's latest Avro schema of `<topic>-value`."""
        registry = RegistrySettings(url=self.registry_url)
        value = FormatSpec(format="avro")
        resolved = resolve_schema(topic, value, None, METADATA_COLUMNS, registry)
        decoder = DecoderSpec(
            topic, value, None, METADATA_COLUMNS, registry, serialize_schema(resolved.arrow_schema)
        )
        return IngestSpec(
            table_name=f"t_{topic}",
            catalog=CATALOG,
            namespace=(self.namespace,),
            table=unique_name("t").replace("-", "_"),
            topic=topic,
            decoder=decoder,
            **kwargs,
        )


@pytest.fixture(scope="module")
def env(
    spark: Any,
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistryServer,
    catalog_server: CatalogServer,
) -> Iterator[Env]:
    register_catalog(spark, CATALOG, catalog_server.spark_properties())
    namespace = unique_namespace("eng")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{namespace}")
    yield Env(kafka_broker.bootstrap, schema_registry.url, catalog_server, namespace)


def payment(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"n{i % 97}", "amount": (i % 1000) / 4}


EXPECTED_ID_SUM = RECORDS * (RECORDS - 1) // 2
EXPECTED_AMOUNT_SUM = sum((i % 1000) / 4 for i in range(RECORDS))


@pytest.fixture(scope="module")
def big_topic(env: Env, kafka_broker: KafkaBroker) -> str:
    topic = kafka_broker.create_topic(unique_name("payments"), PARTITIONS)
    produce_avro(
        env.bootstrap, env.registry_url, topic, [payment(i) for i in range(RECORDS)], PARTITIONS
    )
    return topic


def run(spark: Any, env: Env, spec: IngestSpec) -> IngestOutcome:
    return materialize(spark, spec, env.kafka_conf)


def read_back(env: Env, spec: IngestSpec) -> tuple[int, int, float, int]:
    """(rows, sum(id), sum(amount), distinct ids) by pyiceberg, checked against DuckDB."""
    table = env.catalog.pyiceberg_catalog().load_table(f"{env.namespace}.{spec.table}")
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


def test_100k_records_land_exactly_once(spark: Any, env: Env, big_topic: str) -> None:
    spec = env.spec(big_topic, max_records_per_task=30_000)
    outcome = run(spark, env, spec)
    assert outcome.records_written == RECORDS
    assert outcome.offsets_after == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
    assert read_back(env, spec) == (
        RECORDS,
        EXPECTED_ID_SUM,
        round(EXPECTED_AMOUNT_SUM, 3),
        RECORDS,
    )
    again = run(spark, env, spec)
    assert again.records_written == 0 and again.offsets_after == outcome.offsets_after
    assert read_back(env, spec)[0] == RECORDS


CRASH_SCRIPT = """
import json, sys
from tableflow_core.engine.spark_session import build_spark_session
from tableflow_core.engine.materialize import materialize
from tableflow_core.ingest.spec import IngestSpec
from tests.test_engine_ingest import Env
from tests.fixtures.catalog import CatalogServer
args = json.loads(sys.argv[1])
spark = build_spark_session("local[2]", catalogs={args["catalog"]: args["catalog_props"]})
env = Env(args["bootstrap"], args["registry"], None, args["namespace"])
spec = env.spec(args["topic"], max_records_per_run=args["cap"])
spec = IngestSpec(**{**spec.__dict__, "table": args["table"]})
outcome = materialize(spark, spec, env.kafka_conf)
print("OUTCOME", outcome.records_written)
"""


def run_in_subprocess(env: Env, spec: IngestSpec, cap: int | None, crash_at: str | None) -> int:
    args = {
        "catalog": CATALOG, "catalog_props": env.catalog.spark_properties(),
        "topic": spec.topic, "registry": env.registry_url, "namespace": env.namespace,
        "table": spec.table, "cap": cap, "bootstrap": env.bootstrap,
    }  # fmt: skip
    child_env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash_at:
        child_env[CRASH_ENV] = crash_at
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASH_SCRIPT, json.dumps(args)],
        cwd=REPO, env=child_env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=240)
    finally:
        # The Spark JVM of a killed driver must not outlive it: stop our own group.
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
    if crash_at is None:
        assert proc.returncode == 0, output[-3000:]
    else:
        assert proc.returncode == -9, output[-3000:]
    return proc.returncode


def test_sigkill_before_and_after_commit_then_rerun(spark: Any, env: Env, big_topic: str) -> None:
    spec = env.spec(big_topic)
    run_in_subprocess(env, spec, cap=40_000, crash_at="before_commit")
    assert read_back(env, spec)[0] == 0  # the branch write is invisible on main
    run_in_subprocess(env, spec, cap=40_000, crash_at="after_commit")
    assert read_back(env, spec)[0] == 40_000  # committed just before the kill
    outcome = run(spark, env, spec)
    assert outcome.records_written == RECORDS - 40_000
    assert read_back(env, spec) == (
        RECORDS,
        EXPECTED_ID_SUM,
        round(EXPECTED_AMOUNT_SUM, 3),
        RECORDS,
    )
    refs = spark.sql(f"SELECT name FROM {spec.identifier}.refs").collect()
    assert [r.name for r in refs if r.name != "main"] == []  # crashed runs' branches cleaned up


def test_bad_records_fail_the_run_naming_the_offset(
    spark: Any, env: Env, kafka_broker: KafkaBroker
) -> None:
    from tests.test_engine_helpers import produce_raw

    topic = kafka_broker.create_topic(unique_name("bad"), 1)
    produce_avro(env.bootstrap, env.registry_url, topic, [payment(i) for i in range(5)], 1)
    produce_raw(env.bootstrap, topic, [b"\x07not-avro", b"\x00\x00\x0f\x42\x3fxx"])
    spec = env.spec(topic)
    with pytest.raises(IngestError) as caught:
        run(spark, env, spec)
    message = str(caught.value)
    assert f"topic {topic!r} partition 0 offset 5" in message
    assert "offset 6" in message
    assert [f.offset for f in caught.value.failures] == [5, 6]
    assert read_back(env, spec)[0] == 0


def test_schema_v2_adds_a_column(spark: Any, env: Env, kafka_broker: KafkaBroker) -> None:
    topic = kafka_broker.create_topic(unique_name("evolve"), 2)
    produce_avro(env.bootstrap, env.registry_url, topic, [payment(i) for i in range(10)], 2)
    spec_v1 = env.spec(topic)
    run(spark, env, spec_v1)
    v2_records = [{**payment(i), "country": f"c{i}"} for i in range(10, 16)]
    produce_avro(env.bootstrap, env.registry_url, topic, v2_records, 2, version=2)
    spec_v2 = env.spec(topic)  # resolves v2 now
    spec_v2 = IngestSpec(**{**spec_v2.__dict__, "table": spec_v1.table})
    outcome = run(spark, env, spec_v2)
    assert outcome.records_written == 6
    table = env.catalog.pyiceberg_catalog().load_table(f"{env.namespace}.{spec_v1.table}")
    arrow = table.scan().to_arrow()
    rows = {r["id"]: r["country"] for r in arrow.to_pylist()}
    assert rows == {i: (f"c{i}" if i >= 10 else None) for i in range(16)}
    assert arrow.schema.names[-1] == "country"  # added after the existing columns
    assert set(arrow["_kafka_topic"].to_pylist()) == {topic}
    assert sorted(arrow["_kafka_offset"].to_pylist()) == sorted([*range(8), *range(8)])


def test_offsets_survive_compaction_and_expiry(
    spark: Any, env: Env, kafka_broker: KafkaBroker
) -> None:
    from datetime import UTC, datetime

    from tableflow_core.config.models import CompactSettings, ExpireSnapshotsSettings
    from tableflow_core.engine.table_state import read_table_state
    from tableflow_core.maintenance.operations import compact, expire_snapshots
    from tableflow_core.maintenance.target import SparkTable
    from tableflow_core.state.offsets import read_committed_offsets

    topic = kafka_broker.create_topic(unique_name("maint"), 2)
    produce_avro(env.bootstrap, env.registry_url, topic, [payment(i) for i in range(10)], 2)
    spec = env.spec(topic)
    run(spark, env, spec)
    produce_avro(env.bootstrap, env.registry_url, topic, [payment(i) for i in range(10, 20)], 2)
    run(spark, env, spec)  # two commits -> several small files
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
    table = env.catalog.pyiceberg_catalog().load_table(f"{env.namespace}.{spec.table}")
    assert read_committed_offsets(table, topic).offsets == {0: 10, 1: 10}  # type: ignore[union-attr]

    produce_avro(env.bootstrap, env.registry_url, topic, [payment(i) for i in range(20, 24)], 2)
    assert run(spark, env, spec).records_written == 4
    rows, ids, _, distinct = read_back(env, spec)
    assert (rows, ids, distinct) == (24, sum(range(24)), 24)


def test_a_concurrent_commit_makes_the_run_refuse(
    spark: Any, env: Env, kafka_broker: KafkaBroker
) -> None:
    from tableflow_core.engine.ingest import (
        ConcurrentCommitError,
        _fast_forward_main,
        ingest,
    )
    from tableflow_core.engine.table_state import read_table_state
    from tableflow_core.kafka.offsets import OffsetRange

    topic = kafka_broker.create_topic(unique_name("race"), 1)
    produce_avro(env.bootstrap, env.registry_url, topic, [payment(i) for i in range(6)], 1)
    spec = env.spec(topic, max_records_per_run=3)
    run(spark, env, spec)  # commits offsets {0: 3}
    # planned from stale offsets: refused before anything is read
    with pytest.raises(ConcurrentCommitError, match="changed since the plan"):
        ingest(spark, spec, [OffsetRange(topic, 0, 0, 6)], env.kafka_conf, {})
    # main moves after our branch was cut: fast_forward refuses atomically
    base = read_table_state(spark, spec.identifier).current_snapshot_id
    spark.sql(f"ALTER TABLE {spec.identifier} CREATE BRANCH race_test AS OF VERSION {base}")
    run(spark, env, spec)  # another run commits offsets {0: 6}
    with pytest.raises(ConcurrentCommitError, match="another commit landed"):
        _fast_forward_main(spark, spec, "race_test", {0: 3})
    assert read_back(env, spec)[0] == 6


def test_a_compaction_during_the_write_is_retried_exactly_once(
    spark: Any, env: Env, kafka_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tableflow_core.engine.ingest as ingest_module

    topic = kafka_broker.create_topic(unique_name("compacted"), 1)
    produce_avro(env.bootstrap, env.registry_url, topic, [payment(i) for i in range(8)], 1)
    spec = env.spec(topic, max_records_per_run=4)
    run(spark, env, spec)  # 4 rows, offsets {0: 4}

    # The first publish finds that a real compaction moved main after the branch was cut
    # (a replace snapshot: data unchanged, committed offsets unchanged).
    real_fast_forward = ingest_module._fast_forward_main
    compactions: list[str] = []

    def compaction_lands_first(*args: Any) -> None:
        if not compactions:
            table_arg = spec.identifier.replace("'", "\\'")
            spark.sql(
                f"CALL {CATALOG}.system.rewrite_data_files(table => '{table_arg}', "
                "options => map('rewrite-all', 'true'))"
            )
            compactions.append("done")
        real_fast_forward(*args)

    monkeypatch.setattr(ingest_module, "_fast_forward_main", compaction_lands_first)
    outcome = run(spark, env, spec)
    assert compactions == ["done"]
    assert outcome.offsets_after == {0: 8}
    assert any("commit retried 1 time(s)" in w for w in outcome.warnings)
    rows, id_sum, _, distinct = read_back(env, spec)
    assert (rows, distinct, id_sum) == (8, 8, sum(payment(i)["id"] for i in range(8)))
    monkeypatch.undo()
    assert run(spark, env, spec).records_written == 0  # offsets were found after the retry
