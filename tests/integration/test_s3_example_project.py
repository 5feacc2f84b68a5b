"""The example project (tableflow_project.yml) on its own dev stack, as scripts/demo.sh
runs it: `dev up` starts s3proxy and the catalog on `s3://`, then plan, apply, query,
status and `maintain --dry-run` through the CLI. The table is read back from S3 by an
independent reader (DuckDB with the stack's keys and the metadata file found by listing
the bucket: no catalog, no tableflow code), and the stack's S3 secret is in no output and
in no file of the project but the stack's own credentials file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from tableflow_core.config.dev_stack import CREDENTIALS_FILE, StackRecord
from tableflow_core.dev.processes import port_is_open
from tableflow_core.dev.s3_server import S3Credentials, s3_client
from tableflow_core.readers.duckdb_reader import create_s3_secret, duckdb_connection
from tests.integration.test_docs_examples import example_project

pytestmark = pytest.mark.slow

ORDERS = 1500


def run(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tableflow_core", *args],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, **env, "NO_COLOR": "1", "COLUMNS": "200"},
        timeout=600,
    )


@pytest.fixture(scope="module")
def example_on_s3(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, dict[str, str]]]:
    project = example_project(tmp_path_factory.mktemp("example-s3") / "shop")
    env: dict[str, str] = {}  # the project's own stack: ports chosen by `dev up`
    started = run(project, env, "dev", "up")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield project, env
    finally:
        run(project, env, "dev", "down")


def test_the_example_project_runs_on_s3(example_on_s3: tuple[Path, dict[str, str]]) -> None:
    project, env = example_on_s3
    outputs: list[str] = []

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        result = run(project, env, *args)
        outputs.extend([result.stdout, result.stderr])
        assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
        return result

    record = StackRecord.read(project / ".tableflow" / "dev")
    assert record is not None
    endpoint = record.values["s3_endpoint"]
    status = cli("dev", "status")
    assert "s3" in status.stdout and endpoint.removeprefix("http://") in status.stdout
    cli("dev", "produce", "orders", "--count", str(ORDERS), "--seed", "11")
    cli("plan")
    cli("apply", "--auto-approve")
    queried = cli(
        "query",
        "--format",
        "json",
        "SELECT count(*) AS n, round(sum(amount), 2) AS revenue FROM shop.orders",
    )
    (row,) = json.loads(queried.stdout)
    assert row["n"] == ORDERS
    status_json = json.loads(cli("status", "--json").stdout)
    assert "orders" in json.dumps(status_json)
    cli("maintain", "--dry-run")

    # Independent read: the objects in the bucket, the newest metadata file, DuckDB.
    credentials_file = project / ".tableflow" / "dev" / CREDENTIALS_FILE
    kept = json.loads(credentials_file.read_text())
    credentials = S3Credentials(kept["s3_access_key_id"], SecretStr(kept["s3_secret_access_key"]))
    client = s3_client(endpoint, credentials, "us-east-1")
    keys = [
        item["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket="warehouse", Prefix="shop/"
        )
        for item in page.get("Contents", [])
    ]
    assert any(key.endswith(".parquet") for key in keys), keys
    metadata = sorted(k for k in keys if "/orders" in k and k.endswith(".metadata.json"))
    newest = max(metadata, key=lambda k: int(k.rsplit("/", 1)[1].split("-", 1)[0]))
    con = duckdb_connection()
    create_s3_secret(
        con,
        [
            ("KEY_ID", credentials.access_key_id),
            ("SECRET", kept["s3_secret_access_key"]),
            ("REGION", "us-east-1"),
            ("ENDPOINT", endpoint.removeprefix("http://")),
            ("URL_STYLE", "path"),
            ("USE_SSL", False),
        ],
    )
    count, revenue = con.execute(
        "SELECT count(*), round(sum(amount), 2) FROM iceberg_scan(?)",
        [f"s3://warehouse/{newest}"],
    ).fetchone()  # type: ignore[misc]
    assert (count, str(revenue)) == (ORDERS, str(row["revenue"]))

    # The stack's S3 secret: in no output, in no project file but the credentials file.
    secret = kept["s3_secret_access_key"]
    assert not any(secret in text for text in outputs)
    assert oct(credentials_file.stat().st_mode & 0o777) == "0o600"
    for path in project.rglob("*"):
        # The stack's own files hold it by design: its credentials file, and s3proxy's
        # properties (0600, removed at `dev down`); and the objects' data.
        own = path == credentials_file or path.name == "s3proxy.properties"
        if path.is_file() and not own and "blobs" not in path.parts:
            assert secret.encode() not in path.read_bytes(), path

    down = run(project, env, "dev", "down")
    assert down.returncode == 0, down.stderr
    host, port = endpoint.removeprefix("http://").rsplit(":", 1)
    assert not port_is_open(host, int(port))
