"""`tableflow run --metrics-port`, scraped by a real Prometheus server.

1. A soak: `tableflow run` (its own process and Spark JVM, `--log-format json`) refreshes
   a table every second (at most 60 records a run) on a broker of this test's own while
   a producer writes batches, so a lag builds up;
   Prometheus (Debian's package, tests/fixtures/prometheus.py) scrapes it every second.
   PromQL over Prometheus' HTTP API then returns what the table holds: the records
   written sum to the rows committed (read back with pyiceberg), the lag returns to 0
   once the producer stops. Then the broker is stopped: failed cycles show up with the
   cause `kafka`, `/readyz` fails naming the table, `/healthz` still passes.
2. `tableflow status` and the metrics agree on the lag (a table capped at 50 records a
   run, so some stay behind): both are counted by `tasks/status.table_lag`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from tableflow_core.config.loader import load_project
from tableflow_core.dev.processes import free_port
from tableflow_core.dev.producer import produce_sample
from tableflow_core.observability.health import Health
from tableflow_core.observability.metrics import RunMetrics
from tableflow_core.observability.observer import RunObservation
from tableflow_core.observability.readers import TableReader
from tableflow_core.tasks.run import RunTask
from tableflow_core.tasks.status import StatusTask
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.kafka_server import start_apache_kafka
from tests.fixtures.lake import Lake
from tests.fixtures.stack import SchemaRegistryServer, unique_name
from tests.plan_project import write_project

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
FIRST, BATCHES, BATCH = 100, 8, 40


def start_run(root: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tableflow_core", "--project-dir", str(root), "run",
             "--metrics-port", str(port), "--log-format", "json"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip


def stop_run(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # the Spark JVM never outlives the run
    process.wait(timeout=10)


def endpoint(port: int, path: str) -> tuple[int, dict[str, Any]]:
    response = requests.get(f"http://127.0.0.1:{port}{path}", timeout=10)
    return response.status_code, response.json()


def test_prometheus_scrapes_a_run_over_a_soak_and_sees_the_broker_stop(
    tmp_path: Path,
    schema_registry: SchemaRegistryServer,
    lake: Lake,
    prometheus_factory: Any,
) -> None:
    broker = start_apache_kafka(tmp_path / "broker")  # this test's own: it stops it
    run: subprocess.Popen[bytes] | None = None
    try:
        topic, namespace = unique_name("soak"), unique_namespace("metrics")
        root = write_project(
            tmp_path / "project", bootstrap=broker.bootstrap, registry_url=schema_registry.url,
            catalog_uri=lake.server.uri, credential=lake.server.credential,
            namespace=namespace, catalog_name=lake.catalog_name, storage=lake.storage,
            # At most 60 records a run: the soak's batches (40 a second) build a lag.
            tables=[{"name": "orders", "topic": topic, "refresh_interval": "1s",
                     "max_records_per_run": 60}],
        )  # fmt: skip
        produce_sample("orders", broker.bootstrap, schema_registry.url, topic, FIRST, partitions=2)
        port = free_port()
        log = tmp_path / "run.jsonl"
        run = start_run(root, port, log)
        prometheus = prometheus_factory([f"127.0.0.1:{port}"])
        labels = f'table="orders",topic="{topic}"'
        assert prometheus.wait_for("up{job='tableflow'}", lambda v: v == 1, 120) == 1

        for batch in range(BATCHES):  # the soak: a batch a second while the run refreshes
            if batch == BATCHES - 1:
                last_batch_from = time.time()
            produce_sample(
                "orders", broker.bootstrap, schema_registry.url, topic, BATCH,
                partitions=2, seed=batch + 1,
            )  # fmt: skip
            time.sleep(1)
        last_batch_until = time.time() - 1
        total = FIRST + BATCHES * BATCH

        written = f"sum(tableflow_records_written_total{{{labels}}})"
        assert prometheus.wait_for(written, lambda v: v == total, 180) == total
        lag = f"tableflow_lag_records{{{labels}}}"
        assert prometheus.wait_for(lag, lambda v: v == 0, 60) == 0
        rows = lake.pyiceberg_catalog().load_table(f"{namespace}.orders").scan().to_arrow()
        assert rows.num_rows == total
        # The lag was seen above 0 during the soak, and came back down.
        assert prometheus.value(f"max_over_time({lag}[10m])") >= 60
        assert prometheus.value(f"tableflow_records_read_total{{{labels}}}") == total
        assert prometheus.value(f"tableflow_commits_total{{{labels}}}") >= 2
        assert prometheus.value(f"tableflow_table_ready{{{labels}}}") == 1
        assert prometheus.value(f"tableflow_table_suspended{{{labels}}}") == 0
        last_commit = prometheus.value(f"tableflow_last_commit_timestamp_seconds{{{labels}}}")
        current = lake.pyiceberg_catalog().load_table(f"{namespace}.orders").current_snapshot()
        assert last_commit == pytest.approx(current.timestamp_ms / 1000, abs=0.01)
        # The last commit took in the last batch: its newest record was produced (the
        # producer's CreateTime, this host's clock) while that batch was being produced.
        freshness = prometheus.value(f"tableflow_commit_freshness_seconds{{{labels}}}")
        assert freshness is not None
        assert last_commit - last_batch_until - 0.5 <= freshness
        assert freshness <= last_commit - last_batch_from + 0.5
        cycles = prometheus.value("tableflow_cycle_duration_seconds_count")
        assert cycles is not None and cycles >= 3
        assert prometheus.value(
            f"tableflow_commit_duration_seconds_count{{{labels}}}"
        ) == prometheus.value(f"tableflow_commits_total{{{labels}}}")
        assert prometheus.value("process_resident_memory_bytes{job='tableflow'}") > 10e6
        assert prometheus.value("process_cpu_seconds_total{job='tableflow'}") > 0
        assert endpoint(port, "/readyz") == (200, {"ready": True, "not_ready": {}})
        assert endpoint(port, "/healthz")[0] == 200

        broker.stop()  # a stopped broker: failed cycles, named; not ready
        failures = f'sum(tableflow_cycle_failures_total{{{labels},cause="kafka"}})'
        found = prometheus.wait_for(failures, lambda v: v is not None and v >= 2, 120)
        assert found is not None and found >= 2
        assert prometheus.value(f"tableflow_table_ready{{{labels}}}") == 0
        assert prometheus.value(
            f'sum(tableflow_cycle_failures_total{{{labels},cause!="kafka"}})'
        ) in (None, 0)
        assert endpoint(port, "/readyz") == (
            503,
            {"ready": False, "not_ready": {"orders": "kafka"}},
        )
        assert endpoint(port, "/healthz")[0] == 200  # the scheduler still ticks
    finally:
        if run is not None:
            stop_run(run)
        broker.stop()

    # The run's log: one JSON object per line, the console's figures, no secret.
    text = log.read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    assert all({"time", "level", "event", "table", "command"} <= set(x) for x in lines)
    results = [x for x in lines if x["event"] == "table_result"]
    assert sum(x["records_written"] for x in results) == total
    assert any(x["event"] == "cycle_failed" and x["cause"] == "kafka" for x in lines)
    assert lake.server.credential.split(":")[-1] not in text


def test_status_and_the_metrics_agree_on_lag(
    stack_project: Any, kafka_broker: Any, schema_registry: SchemaRegistryServer, spark: Any
) -> None:
    topic = unique_name("lagging")
    produce_sample("orders", kafka_broker.bootstrap, schema_registry.url, topic, 120, partitions=2)
    root = stack_project(
        namespace=unique_namespace("lag"),
        tables=[{"name": "orders", "topic": topic, "max_records_per_run": 50}],
    )
    project = load_project(root)
    metrics = RunMetrics(project.tables)
    observation = RunObservation(project.tables, metrics, Health(("orders",)), TableReader(project))
    try:
        reports = RunTask(
            project, project.tables, spark_factory=lambda: spark, once=True,
            observers=(observation,),
        ).run()  # fmt: skip
        assert observation.settle(60)
    finally:
        observation.close()
    assert reports[0].results is not None
    written = reports[0].results.tables[0].records_written
    assert 0 < written < 120
    status = StatusTask(project, project.tables).run().tables[0]
    labels = {"table": "orders", "topic": topic}
    sample = metrics.registry.get_sample_value
    assert status.lag == sample("tableflow_lag_records", labels) == 120 - written
    assert status.last_commit_at is not None
    committed_at = datetime.fromisoformat(status.last_commit_at).timestamp()
    assert sample("tableflow_last_commit_timestamp_seconds", labels) == pytest.approx(
        committed_at, abs=1.0
    )
    freshness = sample("tableflow_commit_freshness_seconds", labels)
    assert freshness is not None and 0 <= freshness < 300
