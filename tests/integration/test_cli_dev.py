"""`tableflow dev` and `tableflow query` as users run them: two projects made with
`tableflow init`, each with its own stack, and no environment variable anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from pyiceberg.catalog import load_catalog

from tableflow_core.config.dev_stack import StackRecord
from tableflow_core.dev.processes import port_is_open

# The stack's addresses must come from the project, never from the caller's environment.
STACK_VARIABLES = ("TABLEFLOW_KAFKA_PORT", "TABLEFLOW_REGISTRY_PORT", "TABLEFLOW_CATALOG_PORT")


def run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in STACK_VARIABLES}
    return subprocess.run(
        [sys.executable, "-m", "tableflow_core", *args],
        cwd=project,
        capture_output=True,
        text=True,
        env={**env, "NO_COLOR": "1", "COLUMNS": "200"},
        timeout=300,
    )


def records_in(bootstrap: str, topic: str, partitions: int) -> int:
    """Records in `topic`: the sum of its partitions' end offsets."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "t"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        )
    finally:
        consumer.close()


def record_of(project: Path) -> StackRecord:
    record = StackRecord.read(project / ".tableflow" / "dev")
    assert record is not None
    return record


@pytest.fixture(scope="module")
def dev_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("devcli")
    assert run(base, "init", "proj").returncode == 0
    project = base / "proj"
    started = run(project, "dev", "up")
    assert started.returncode == 0, started.stderr
    try:
        yield project
    finally:
        run(project, "dev", "down")


def test_dev_up_status_produce_query_down(dev_project: Path) -> None:
    project = dev_project
    status = run(project, "dev", "status")
    assert status.returncode == 0, status.stderr
    record = record_of(project)
    for component, address in (
        ("kafka", record.values["kafka_bootstrap"]),
        ("schema-registry", record.values["schema_registry_url"]),
        ("catalog", record.values["catalog_url"]),
        ("s3", record.values["s3_endpoint"]),
    ):
        line = next(line for line in status.stdout.splitlines() if f" {component} " in line)
        assert address in line and "running" in line
    secret = record.secrets["s3_secret_access_key"]
    assert secret not in status.stdout + status.stderr

    produced = run(project, "dev", "produce", "orders", "--count", "3000", "--seed", "7")
    assert produced.returncode == 0, produced.stderr
    assert "Produced 3,000 orders records" in produced.stdout
    assert "%4|" not in produced.stderr  # librdkafka's retries stay out of the console
    bootstrap = record.values["kafka_bootstrap"]
    assert records_in(bootstrap, "orders", partitions=4) == 3000

    # The catalog `dev up` serves is the project's embedded catalog: a table made
    # through it is what `tableflow query` reads with DuckDB.
    catalog = load_catalog("t", type="rest", uri=record.values["catalog_url"])
    catalog.create_namespace("raw")
    table = catalog.create_table("raw.numbers", pa.schema([("n", pa.int64())]))
    table.append(pa.table({"n": pa.array(range(1, 101), pa.int64())}))
    assert (project / ".tableflow" / "warehouse").is_dir()

    queried = run(project, "query", "SELECT count(*) AS c, sum(n) AS s FROM raw.numbers")
    assert queried.returncode == 0, queried.stderr
    assert "5050" in queried.stdout and "100" in queried.stdout

    bad = run(project, "query", "SELECT * FROM raw.nope")
    assert bad.returncode == 1
    assert "query failed" in bad.stderr

    down = run(project, "dev", "down")
    assert down.returncode == 0, down.stderr
    assert not port_is_open("127.0.0.1", record.ports["kafka"]["port"])
    after = run(project, "dev", "status")
    assert after.returncode == 1
    refused = run(project, "plan")
    assert refused.returncode == 1 and "tableflow dev up" in refused.stderr

    # Data and addresses survive down/up: the topic still holds every record.
    assert run(project, "dev", "up").returncode == 0
    assert record_of(project).values == record.values
    assert records_in(bootstrap, "orders", partitions=4) == 3000


def test_a_second_project_gets_its_own_stack(
    dev_project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The collision of issue 29: a second project's `dev up` while the first one's runs.
    Each gets its own ports, and each project's plan reads its own Kafka."""
    base = tmp_path_factory.mktemp("second")
    assert run(base, "init", "other").returncode == 0
    other = base / "other"
    text = (other / "tableflow_project.yml").read_text()
    (other / "tableflow_project.yml").write_text(
        text.replace("dev_stack: {}", "dev_stack: {components: [kafka, schema-registry, catalog]}")
    )
    started = run(other, "dev", "up")
    assert started.returncode == 0, started.stderr
    try:
        mine, theirs = record_of(dev_project), record_of(other)
        assert set(mine.values.values()).isdisjoint(
            v for k, v in theirs.values.items() if k != "s3_region"
        )
        assert run(dev_project, "dev", "status").returncode == 0
        # The first project's topic has records; the second project's Kafka has no topic.
        assert "ingest 3,000 records from topic orders" in run(dev_project, "plan").stdout
        plan = run(other, "plan")
        assert "ingest 3,000" not in plan.stdout and "(0 records)" in plan.stdout
        assert "topic 'orders'" in plan.stdout + plan.stderr
    finally:
        assert run(other, "dev", "down").returncode == 0


def test_dev_on_a_target_without_dev_stack_is_refused(dev_project: Path) -> None:
    result = run(dev_project, "--target", "prod", "dev", "status")
    assert result.returncode == 1
    assert "no dev_stack" in result.stderr
