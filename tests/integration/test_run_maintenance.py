"""`tableflow run` runs due maintenance between refreshes (real broker, registry, Spark,
catalog, a SQL catalog on SQLite to publish to, and a Delta log).

Cycle 1 ingests, then compacts (due: never run) under the table's lock; the compaction's
commit is published and mirrored in the Delta log. Cycle 2 plans afresh from the
maintained table and ingests the new records; compaction is not due again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pyiceberg.catalog import load_catalog

from tableflow_core.delta import mirrored_snapshot_id
from tableflow_core.tasks.run import CycleReport, RunTask
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.integration.test_delta_sync import deltalake_rows, iceberg_rows
from tests.unit.test_engine_helpers import produce_avro

pytestmark = pytest.mark.slow


def records(start: int, count: int) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}", "amount": i / 4} for i in range(start, start + count)]


def test_run_maintains_between_refreshes_then_publishes_and_syncs_delta(
    spark: Any,
    tmp_path: Path,
    make_env: Any,
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistryServer,
) -> None:
    topic = kafka_broker.create_topic(unique_name("runmaint"), 2)
    produce_avro(kafka_broker.bootstrap, schema_registry.url, topic, records(0, 20), 2)
    env = make_env(
        topic,
        refresh_interval="1s",
        publish_to=["lake"],
        formats=["iceberg", "delta"],
        maintenance={"every": "1h", "compact": {"min_input_files": 2}},
    )
    sql_uri = f"sqlite:///{tmp_path / 'lake.db'}"
    warehouse = (tmp_path / "wh").as_uri()
    config_file = env.root / "tableflow_project.yml"
    document = yaml.safe_load(config_file.read_text())
    document["targets"]["test"]["publish_catalogs"] = {
        "lake": {"type": "sql", "uri": sql_uri, "warehouse": warehouse}
    }
    config_file.write_text(yaml.safe_dump(document, sort_keys=False))
    project = env.project
    lake = load_catalog("lake", type="sql", uri=sql_uri, warehouse=warehouse)
    seen: list[dict[str, Any]] = []

    def after_cycle(report: CycleReport) -> None:
        table = env.pyiceberg_table()
        snapshot = table.current_snapshot()
        seen.append(
            {
                "report": report,
                "rows": iceberg_rows(table),
                "location": table.metadata_location,
                "snapshot": snapshot.snapshot_id,
                "properties": dict(table.properties),
                "published": lake.load_table(f"{env.namespace}.t").metadata_location,
                "mirrored": mirrored_snapshot_id(table.metadata.location),
                "delta_rows": deltalake_rows(table.metadata.location),
            }
        )
        if len(seen) == 1:
            produce_avro(kafka_broker.bootstrap, schema_registry.url, topic, records(20, 8), 2)

    reports = RunTask(
        project, project.tables, spark_factory=lambda: spark, max_cycles=2, on_cycle=after_cycle
    ).run()
    assert [r.ok for r in reports] == [True, True], reports

    first, second = seen
    (maintained,) = first["report"].maintenance
    assert maintained.report is not None and maintained.ok, maintained
    assert [r.operation for r in maintained.report.results] == ["compact"]
    assert first["report"].results.tables[0].records_written == 20
    assert "tableflow.maintenance.compact.last-run" in first["properties"]
    assert [r["id"] for r in first["rows"]] == list(range(20))
    # The maintenance commit is the table's current state: published and mirrored.
    assert maintained.report.metadata_location == first["location"]
    assert first["published"] == first["location"]
    assert maintained.published is not None and maintained.published.ok
    assert maintained.delta is not None and first["mirrored"] == first["snapshot"]
    assert first["delta_rows"] == first["rows"]

    # Cycle 2 planned from the maintained table: the new records land, nothing is due.
    (not_due,) = second["report"].maintenance
    assert not_due.report is None and not_due.note == "nothing due"
    assert second["report"].results.tables[0].records_written == 8
    assert [r["id"] for r in second["rows"]] == list(range(28))
    assert second["published"] == second["location"] != first["location"]
    assert second["mirrored"] == second["snapshot"]
    assert second["delta_rows"] == second["rows"]
