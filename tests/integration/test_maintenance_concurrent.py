"""Compaction while ingest keeps committing loses no commit (real broker, registry, Spark).

One thread ingests a topic in small runs through plan + apply (what `tableflow apply` and
`tableflow run` do), the other compacts the same table over and over. Every record must
land exactly once and the committed offsets must reach the end of the topic.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tableflow_core.config.models.maintenance import CompactSettings
from tableflow_core.maintenance import DueOperation, run_maintenance
from tableflow_core.plan.plan_file import StalePlanError
from tableflow_core.state.offsets import read_committed_offsets
from tableflow_core.state.table_state import read_table_state, table_exists
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.catalog import CatalogServer
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.unit.test_engine_helpers import duckdb_connection, produce_avro

pytestmark = pytest.mark.slow
RECORDS = 120
PER_RUN = 12
PACED_RUNS = 3


def test_compaction_during_ingest_loses_no_commit(
    spark: Any,
    make_env: Any,
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistryServer,
    catalog_server: CatalogServer,
) -> None:
    topic = kafka_broker.create_topic(unique_name("race"), 2)
    records = [{"id": i, "name": f"n{i}", "amount": i / 4} for i in range(RECORDS)]
    produce_avro(kafka_broker.bootstrap, schema_registry.url, topic, records, 2)
    env = make_env(topic, max_records_per_run=PER_RUN)
    spec = env.spec()
    namespace = env.namespace
    compact = DueOperation("t", "compact", CompactSettings(min_input_files=2), 0, None)

    done, compacted = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {"runs": 0, "refused": [], "error": None}

    def keep_ingesting() -> None:
        try:
            for _ in range(4 * RECORDS // PER_RUN):
                project = env.project
                plan = PlanTask(project, project.tables).run()
                try:
                    results = ApplyTask(project, plan, spark=spark).run()
                except StalePlanError as exc:  # a compaction landed after the plan
                    outcome["refused"].append(str(exc))
                    continue
                (table,) = results.tables
                if table.status != "success":  # nothing committed; `run` retries
                    outcome["refused"].append(table.error or table.status)
                    continue
                outcome["runs"] += 1
                if sum(table.offsets_after.values()) >= RECORDS:
                    return
                # The first runs paced by the compactions (a refused publish no longer
                # slows ingest: a plain append goes on top of a compaction).
                if outcome["runs"] <= PACED_RUNS:
                    compacted.wait(timeout=10)
                    compacted.clear()
        except BaseException as exc:  # surfaced by the main thread
            outcome["error"] = exc
        finally:
            done.set()

    ingester = threading.Thread(target=keep_ingesting)
    ingester.start()
    while not table_exists(spark, spec.identifier) and not done.is_set():
        time.sleep(0.2)
    compactions = 0
    while not done.is_set():
        report = run_maintenance(spark, f"{spec.catalog}.{namespace}.t", [compact])
        if report.ok and report.results[0].metrics.get("rewritten_data_files_count"):
            compactions += 1
            compacted.set()
    ingester.join(timeout=600)
    assert outcome["error"] is None, outcome["error"]
    # A refused run is a stale plan or a commit conflict, never another failure.
    assert all(
        any(word in text for word in ("stale", "commit", "changed")) for text in outcome["refused"]
    ), outcome

    table = catalog_server.pyiceberg_catalog().load_table(f"{namespace}.t")
    operations = [s.summary.operation.value for s in table.metadata.snapshots if s.summary]
    # Compactions really landed between ingest commits.
    assert compactions >= 2 and operations.count("replace") >= 2, (compactions, outcome)
    first_replace = operations.index("replace")
    assert "append" in operations[first_replace:], operations
    half = RECORDS // 2
    assert read_committed_offsets(table, topic).offsets == {0: half, 1: half}  # type: ignore[union-attr]
    assert read_table_state(spark, spec.identifier).committed_offsets(topic).offsets == {  # type: ignore[union-attr]
        0: half,
        1: half,
    }
    ids = table.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist()
    assert sorted(ids) == list(range(RECORDS))  # every record exactly once
    rows, distinct = (
        duckdb_connection()
        .execute(
            f"SELECT count(*), count(DISTINCT id) FROM iceberg_scan('{table.metadata_location}')"
        )
        .fetchone()
    )  # type: ignore[misc]
    assert (rows, distinct) == (RECORDS, RECORDS)
