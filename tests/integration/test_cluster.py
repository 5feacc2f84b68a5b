"""A real Spark cluster: standalone master and worker started with `spark-class` from
the pyspark package, on 127.0.0.1 and free ports, stopped by PID. `tableflow apply`
runs through `spark://127.0.0.1:<port>`: its executor is a separate JVM launched by the
worker, reading Kafka and writing the warehouse itself. Rows are counted back with
pyiceberg and DuckDB. docs/cluster.md is the how-to.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pytest
import yaml

from tableflow_core.dev.processes import BackgroundProcess, free_port, start_background
from tableflow_core.dev.producer import produce_sample
from tableflow_core.readers.duckdb_reader import duckdb_connection
from tests.fixtures.catalog import CatalogServer, unique_namespace
from tests.fixtures.projects import StackProject
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
RECORDS = 20_000


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


@dataclass(frozen=True)
class SparkCluster:
    master_url: str
    master: BackgroundProcess
    worker: BackgroundProcess
    work_dir: Path


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    base = tmp_path_factory.mktemp("spark-cluster")
    env = {
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOG_DIR": str(base / "logs"),
        "PYSPARK_PYTHON": sys.executable,
        # The executor's Python workers import this checkout's tableflow_core.
        "PYTHONPATH": str(REPO),
    }
    port = free_port(HOST)
    master_command = [
        str(spark_class()), "org.apache.spark.deploy.master.Master",
        "--host", HOST, "--port", str(port), "--webui-port", str(free_port(HOST)),
    ]  # fmt: skip
    master = start_background(
        "spark-master", master_command, HOST, port, base / "master.log", env=env, timeout=90
    )
    master_url = f"spark://{HOST}:{port}"
    try:
        worker_port = free_port(HOST)
        work_dir = base / "work"
        worker_command = [
            str(spark_class()), "org.apache.spark.deploy.worker.Worker",
            "--host", HOST, "--port", str(worker_port), "--webui-port", str(free_port(HOST)),
            "--cores", "1", "--memory", "1g", "--work-dir", str(work_dir), master_url,
        ]  # fmt: skip
        worker = start_background(
            "spark-worker",
            worker_command,
            HOST,
            worker_port,
            base / "worker.log",
            env=env,
            timeout=90,
        )
        try:
            yield SparkCluster(master_url, master, worker, work_dir)
        finally:
            worker.stop()
    finally:
        master.stop()


def cluster_spark_settings(master_url: str) -> dict[str, object]:
    """What a project sets to run on a standalone cluster (see docs/cluster.md)."""
    return {
        "master": master_url,
        "conf": {
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.executor.memory": "768m",
            "spark.executor.cores": 1,
            "spark.cores.max": 1,
            "spark.ui.enabled": False,
            "spark.executorEnv.PYTHONPATH": str(REPO),
        },
    }


def test_apply_on_a_standalone_cluster(
    spark_cluster: SparkCluster,
    stack_project: StackProject,
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistryServer,
    catalog_server: CatalogServer,
) -> None:
    topic = unique_name("orders")
    namespace = unique_namespace("cluster")
    produced = produce_sample(
        "orders", kafka_broker.bootstrap, schema_registry.url, topic, RECORDS, partitions=4, seed=5
    )
    assert produced.records == RECORDS
    # The second table's dedup and unique check run in the read tasks: their key reports
    # travel from the executor's JVM to the driver (a Spark accumulator).
    deduped = {
        "name": "orders_deduped", "topic": topic,
        "transforms": [{"type": "dedup", "keys": ["order_id"], "keep": "last"}],
        "checks": [{"type": "unique", "columns": ["order_id"]}],
    }  # fmt: skip
    root = stack_project(namespace=namespace, tables=[{"name": "orders", "topic": topic}, deduped])
    config_file = root / "tableflow_project.yml"
    config = yaml.safe_load(config_file.read_text())
    config["targets"]["test"]["spark"] = cluster_spark_settings(spark_cluster.master_url)
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))

    result = subprocess.run(
        [sys.executable, "-m", "tableflow_core", "apply", "--auto-approve"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": HOST, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-5000:]}"
    assert result.stdout.count(f"{RECORDS:,} records written") == 2, result.stdout

    # The work ran in an executor the worker launched (its own JVM, its own directory).
    executor_logs = list(spark_cluster.work_dir.glob("app-*/*/stderr"))
    assert executor_logs, f"no executor ran under {spark_cluster.work_dir}"
    assert spark_cluster.master.alive and spark_cluster.worker.alive

    table = catalog_server.pyiceberg_catalog().load_table((namespace, "orders"))
    rows = table.scan().to_arrow()
    assert rows.num_rows == RECORDS
    assert pc.count_distinct(rows["order_id"]).as_py() == RECORDS

    deduped_table = catalog_server.pyiceberg_catalog().load_table((namespace, "orders_deduped"))
    summary = deduped_table.current_snapshot().summary.additional_properties
    assert summary["tableflow.dedup.ran-in"] == "read tasks"  # every task's report arrived
    assert summary["tableflow.checks"].startswith("pass")
    assert deduped_table.scan().to_arrow().num_rows == RECORDS

    con = duckdb_connection()
    count = con.execute(
        "SELECT count(*), count(DISTINCT order_id) FROM iceberg_scan(?)", [table.metadata_location]
    ).fetchone()
    assert count == (RECORDS, RECORDS)
