"""`tableflow dev` and `tableflow query` as users run them, on free ports."""

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

from tableflow_core.dev.processes import free_port, port_is_open


def run(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tableflow_core", *args],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, **env, "NO_COLOR": "1", "COLUMNS": "200"},
        timeout=180,
    )


def records_in(bootstrap: str, topic: str, partitions: int) -> int:
    """Records in `topic`: the sum of its partitions' end offsets."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "t", "receive.message.max.bytes": 2147483647}
    )
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        )
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def dev_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    base = tmp_path_factory.mktemp("devcli")
    env = {
        "TABLEFLOW_KAFKA_PORT": str(free_port()),
        "TABLEFLOW_REGISTRY_PORT": str(free_port()),
        "TABLEFLOW_CATALOG_PORT": str(free_port()),
    }
    assert run(base, env, "init", "proj").returncode == 0
    project = base / "proj"
    started = run(project, env, "dev", "up")
    assert started.returncode == 0, started.stderr
    try:
        yield project, env
    finally:
        run(project, env, "dev", "down")


def test_dev_up_status_produce_query_down(dev_project: tuple[Path, dict[str, str]]) -> None:
    project, env = dev_project
    status = run(project, env, "dev", "status")
    assert status.returncode == 0, status.stderr
    for component in ("kafka", "schema-registry", "catalog"):
        assert component in status.stdout

    produced = run(project, env, "dev", "produce", "orders", "--count", "3000", "--seed", "7")
    assert produced.returncode == 0, produced.stderr
    assert "Produced 3,000 orders records" in produced.stdout

    bootstrap = f"127.0.0.1:{env['TABLEFLOW_KAFKA_PORT']}"
    assert records_in(bootstrap, "orders", partitions=4) == 3000

    # The catalog `dev up` serves is the project's embedded catalog: a table made
    # through it is what `tableflow query` reads with DuckDB.
    catalog = load_catalog(
        "t", type="rest", uri=f"http://127.0.0.1:{env['TABLEFLOW_CATALOG_PORT']}"
    )
    catalog.create_namespace("raw")
    table = catalog.create_table("raw.numbers", pa.schema([("n", pa.int64())]))
    table.append(pa.table({"n": pa.array(range(1, 101), pa.int64())}))
    assert (project / ".tableflow" / "warehouse").is_dir()

    queried = run(project, env, "query", "SELECT count(*) AS c, sum(n) AS s FROM raw.numbers")
    assert queried.returncode == 0, queried.stderr
    assert "5050" in queried.stdout and "100" in queried.stdout

    bad = run(project, env, "query", "SELECT * FROM raw.nope")
    assert bad.returncode == 1
    assert "query failed" in bad.stderr

    down = run(project, env, "dev", "down")
    assert down.returncode == 0, down.stderr
    assert not port_is_open("127.0.0.1", int(env["TABLEFLOW_KAFKA_PORT"]))
    after = run(project, env, "dev", "status")
    assert after.returncode == 1

    # Data survives down/up: the topic still holds every record.
    assert run(project, env, "dev", "up").returncode == 0
    assert records_in(bootstrap, "orders", partitions=4) == 3000


def test_dev_on_a_target_without_dev_stack_is_refused(
    dev_project: tuple[Path, dict[str, str]],
) -> None:
    project, env = dev_project
    result = run(project, env, "--target", "prod", "dev", "status")
    assert result.returncode == 1
    assert "no dev_stack" in result.stderr
