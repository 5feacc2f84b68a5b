"""`tableflow run`: the schedule (pure) and refresh cycles against the real stack."""

from __future__ import annotations

import pytest

from tableflow_core.config.loader import load_project
from tableflow_core.dev.producer import produce_sample
from tableflow_core.tasks.run import RunTask
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.stack import unique_name


@pytest.mark.slow
def test_cycles_ingest_new_records_and_report_blocked_tables(
    stack_project, sample_orders, catalog_server, spark
) -> None:
    topic = sample_orders.create(120, partitions=2)
    namespace = unique_namespace("runs")
    root = stack_project(
        namespace=namespace,
        tables=[
            {"name": "orders", "topic": topic, "refresh_interval": "1s"},
            # Delta cannot mirror upserts: the plan blocks this table, the other still runs.
            {
                "name": "latest",
                "topic": topic,
                "mode": "upsert",
                "key_columns": ["order_id"],
                "formats": ["iceberg", "delta"],
            },
        ],
    )
    project = load_project(root)

    def rows() -> int:
        catalog = catalog_server.pyiceberg_catalog()
        return catalog.load_table(f"{namespace}.orders").scan().to_arrow().num_rows

    first = RunTask(project, project.tables, spark_factory=lambda: spark, once=True).run()
    # Two lanes (tasks/run.py): the plain table's (the shared job's) and the Delta table's.
    by_lane = {r.lane: r for r in first}
    assert sorted(by_lane) == ["own:latest", "shared"] and len(first) == 2, first
    blocked, ran = by_lane["own:latest"], by_lane["shared"]
    assert blocked.blocked == ("latest",) and blocked.results is None
    assert not blocked.ok  # a blocked table makes `run --once` exit 1
    assert ran.tables == ("orders",) and ran.ok
    assert ran.results is not None and ran.results.status == "success"
    assert rows() == 120

    sample_orders.produce(topic, 30, partitions=2, seed=1)
    orders_only = tuple(t for t in project.tables if t.name == "orders")
    # Two cycles one refresh_interval (1 s) apart: new records, then nothing new.
    cycles = RunTask(project, orders_only, spark_factory=lambda: spark, max_cycles=2).run()
    assert [c.ok for c in cycles] == [True, True]
    assert cycles[0].results is not None and cycles[0].results.tables[0].records_written == 30
    assert cycles[1].results is None  # plan had no changes
    assert rows() == 150


@pytest.mark.slow
def test_run_keeps_one_embedded_catalog_across_cycles(
    tmp_path, kafka_broker, schema_registry, spark
) -> None:
    """An in-process embedded catalog with client_credentials and no configured secret
    draws a random secret when it starts. `run` must keep that one server (and the warm
    Spark session's token for it) for all its cycles: a server per cycle made every
    cycle after the first fail with "Invalid bearer token"."""
    import yaml

    from tableflow_core.dev.processes import free_port

    topic = unique_name("embedded_run")
    namespace = unique_namespace("embedded_run")
    catalog_name = f"tf_{namespace}"
    produce_sample("orders", kafka_broker.bootstrap, schema_registry.url, topic, 40, partitions=1)
    project_yaml = {
        "name": "embedded_run",
        "default_target": "dev",
        "targets": {
            "dev": {
                "kafka": {"bootstrap_servers": kafka_broker.bootstrap},
                "schema_registry": {"url": schema_registry.url},
                "catalog": {
                    "type": "embedded",
                    "name": catalog_name,
                    "warehouse": str(tmp_path / "warehouse"),
                    "port": free_port("127.0.0.1"),
                },
            }
        },
        "defaults": {"namespace": namespace},
        "tables": [{"name": "orders", "topic": topic, "refresh_interval": "1s"}],
    }
    (tmp_path / "tableflow_project.yml").write_text(yaml.safe_dump(project_yaml))
    project = load_project(tmp_path)
    batches = iter([25, 10])

    def produce_more(report: object) -> None:
        count = next(batches, 0)
        if count:
            produce_sample(
                "orders", kafka_broker.bootstrap, schema_registry.url, topic, count,
                partitions=1, seed=count,
            )  # fmt: skip

    cycles = RunTask(
        project, project.tables, spark_factory=lambda: spark, max_cycles=3, on_cycle=produce_more
    ).run()
    assert [c.error for c in cycles] == [None, None, None]
    written = [c.results.tables[0].records_written if c.results else 0 for c in cycles]
    assert written == [40, 25, 10]
