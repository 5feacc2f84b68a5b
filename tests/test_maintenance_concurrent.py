"""Compaction while ingest keeps committing loses no commit (real broker, registry, Spark).

One thread ingests a topic in small runs (the engine's `materialize`, what apply runs
today), the other compacts the same table over and over. Every record must land
exactly once and the committed offsets must reach the end of the topic.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tableflow_core.config.models import CompactSettings
from tableflow_core.engine.ingest import ConcurrentCommitError
from tableflow_core.engine.materialize import materialize
from tableflow_core.engine.spark_session import register_catalog
from tableflow_core.engine.table_state import read_table_state, table_exists
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.maintenance import DueOperation, run_maintenance
from tableflow_core.schemas.decoding import DecoderSpec, serialize_schema
from tableflow_core.schemas.formats import METADATA_COLUMNS, FormatSpec
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import resolve_schema
from tableflow_core.state.offsets import read_committed_offsets
from tests.fixtures.catalog import CatalogServer, unique_namespace
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.test_engine_helpers import duckdb_connection, produce_avro

pytestmark = pytest.mark.slow
CATALOG = "tf_maint_race"
RECORDS = 120
PER_RUN = 12


def test_compaction_during_ingest_loses_no_commit(
    spark: Any,
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistryServer,
    catalog_server: CatalogServer,
) -> None:
    register_catalog(spark, CATALOG, catalog_server.spark_properties())
    namespace = unique_namespace("race")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{namespace}")
    topic = kafka_broker.create_topic(unique_name("race"), 2)
    records = [{"id": i, "name": f"n{i}", "amount": i / 4} for i in range(RECORDS)]
    produce_avro(kafka_broker.bootstrap, schema_registry.url, topic, records, 2)
    registry = RegistrySettings(url=schema_registry.url)
    value = FormatSpec(format="avro")
    resolved = resolve_schema(topic, value, None, METADATA_COLUMNS, registry)
    spec = IngestSpec(
        table_name="race",
        catalog=CATALOG,
        namespace=(namespace,),
        table="race",
        topic=topic,
        decoder=DecoderSpec(
            topic, value, None, METADATA_COLUMNS, registry, serialize_schema(resolved.arrow_schema)
        ),
        max_records_per_run=PER_RUN,
    )
    kafka_conf = {"bootstrap.servers": kafka_broker.bootstrap}
    compact = DueOperation("race", "compact", CompactSettings(min_input_files=2), 0, None)

    done = threading.Event()
    outcome: dict[str, Any] = {"runs": 0, "refused": 0, "error": None}

    def keep_ingesting() -> None:
        try:
            for _ in range(4 * RECORDS // PER_RUN):
                try:
                    result = materialize(spark, spec, kafka_conf)
                except ConcurrentCommitError:
                    outcome["refused"] += 1  # nothing committed; `run` retries next interval
                    continue
                outcome["runs"] += 1
                if sum(result.offsets_after.values()) >= RECORDS:
                    return
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
        report = run_maintenance(spark, f"{CATALOG}.{namespace}.race", [compact])
        compactions += report.ok and bool(
            report.results[0].metrics.get("rewritten_data_files_count")
        )
    ingester.join(timeout=600)
    assert outcome["error"] is None, outcome["error"]

    table = catalog_server.pyiceberg_catalog().load_table(f"{namespace}.race")
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
