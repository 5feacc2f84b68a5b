"""How long `plan` takes for a 50-table project on the local stack (target: < 2 s).

Starts Apache Kafka, the dev registry and the catalog server (in-process) on free ports,
makes 50 topics with a few Avro records and 50 existing tables, then prints:
- baseline: the bare reads plan needs, one after another (catalog load_table,
  registry get_version, Kafka watermarks for each table);
- plan: the full PlanTask (concurrent reads + pure builder), cold and warm.

Run: .venv/bin/python benchmarks/plan.py [--tables 50]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest import servers  # benchmarks/ is on sys.path when a script runs

from tableflow_core.catalog.runner import serve_in_background
from tableflow_core.catalog.settings import CatalogServerSettings
from tableflow_core.config.loader import load_project
from tableflow_core.dev.producer import produce_sample
from tableflow_core.kafka.admin import get_watermarks
from tableflow_core.plan.desired import format_spec
from tableflow_core.plan.world import read_world
from tableflow_core.schemas.evolution import iceberg_schema_for
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.targets.catalog import open_catalog
from tableflow_core.targets.kafka import kafka_consumer_config
from tableflow_core.tasks.plan import PlanTask
from tests.plan_project import write_project


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=50)
    n = parser.parse_args().tables
    base = Path(tempfile.mkdtemp(prefix="tableflow-bench-plan-"))
    catalog = CatalogServerSettings(
        warehouse=base / "warehouse", auth="none", log_level="warning", access_log=False
    )
    with servers(base) as (bootstrap, reg_url), serve_in_background(catalog) as server:
        topics = [f"bench_{i:03d}" for i in range(n)]
        for topic in topics:
            produce_sample("orders", bootstrap, reg_url, topic, 5, partitions=2)
        root = write_project(
            base / "project", bootstrap=bootstrap, registry_url=reg_url, catalog_uri=server.uri,
            credential="", namespace="bench",
            tables=[{"name": t, "topic": t, "metadata_columns": ["offset"]} for t in topics],
        )  # fmt: skip
        project = load_project(root)
        with open_catalog(project) as handle:
            world = read_world(project, project.tables, handle)
            handle.catalog.create_namespace("bench")
            for table in project.tables:
                schema = iceberg_schema_for(world.schemas[table.name].arrow_schema)
                handle.catalog.create_table(("bench", table.table), schema)

        # Baseline: the same reads, sequential, no planning.
        started = time.perf_counter()
        with open_catalog(project) as handle:
            conf = kafka_consumer_config(project.target.kafka)
            client = RegistrySettings(url=reg_url).client()
            for table in project.tables:
                handle.catalog.load_table(("bench", table.table))
                client.get_version(
                    format_spec(table.value).subject_for(table.topic, False), "latest"
                )
                get_watermarks(conf, table.topic)
        baseline = time.perf_counter() - started

        timings = []
        for _ in range(3):
            started = time.perf_counter()
            plan = PlanTask(project, project.tables).run()
            timings.append(time.perf_counter() - started)
        assert len(plan.fingerprints) == n
        print(f"tables: {n}; plan: {plan.summary_line()}")
        print(f"baseline (bare reads, sequential): {baseline:6.2f} s")
        print(f"plan cold (first run):             {timings[0]:6.2f} s")
        print(f"plan warm (best of next 2):        {min(timings[1:]):6.2f} s   target < 2 s")


if __name__ == "__main__":
    main()
