"""A target whose storage block carries static S3 keys through `env_var()` (a store
without roles or vending), through the CLI as users run it: plan (saved to a file),
apply of that plan, `query` (DuckDB with its own S3 secret, the catalog asked for no
keys), `status --json`, `maintain --dry-run`. The table is read back by pyiceberg with its
own keys and by DuckDB from the metadata file; the keys are in no output, in no file the
project wrote (plan file, run results, Spark's event log) and in no table property.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tableflow_core.readers.duckdb_reader import create_s3_secret, duckdb_connection
from tests.fixtures.apply_env import REPO
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.lake import Lake
from tests.fixtures.projects import project_writer
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.unit.test_engine_helpers import produce_avro

pytestmark = pytest.mark.slow

KEY_ID_ENV, SECRET_ENV = "SHOP_S3_ACCESS_KEY_ID", "SHOP_S3_SECRET_ACCESS_KEY"


def test_static_keys_from_env_var_work_everywhere_and_are_never_shown(
    tmp_path: Path,
    s3_catalog: S3CatalogServer,
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistryServer,
) -> None:
    s3 = s3_catalog.s3
    key_id, secret = s3.credentials.access_key_id, s3.credentials.secret_access_key
    topic = kafka_broker.create_topic(unique_name("s3static"), 2)
    rows = [{"id": i, "name": f"n{i}", "amount": i / 4} for i in range(250)]
    produce_avro(kafka_broker.bootstrap, schema_registry.url, topic, rows, 2)
    namespace = unique_namespace("s3static")
    storage = {
        "endpoint": s3.endpoint,
        "region": s3.region,
        "path_style_access": True,
        "access_key_id": f"{{{{ env_var('{KEY_ID_ENV}') }}}}",
        "secret_access_key": f"{{{{ env_var('{SECRET_ENV}') }}}}",
    }
    lake = Lake("s3", s3_catalog, "tf_s3_static", storage)
    write = project_writer(tmp_path, kafka_broker, schema_registry.url, lake)
    root = write(
        namespace=namespace, tables=[{"name": "t", "topic": topic, "metadata_columns": []}]
    )
    events = tmp_path / "events"
    events.mkdir()
    project_file = root / "tableflow_project.yml"
    config = yaml.safe_load(project_file.read_text())
    config["targets"]["test"].setdefault("spark", {})["conf"] = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
    }
    project_file.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "NO_COLOR": "1",
        KEY_ID_ENV: key_id,
        SECRET_ENV: secret.get_secret_value(),
    }
    outputs: list[str] = []

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "tableflow_core", "--project-dir", str(root), *args],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        outputs.extend([result.stdout, result.stderr])
        assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
        return result

    plan_file = str(root / "plan.json")  # checked for the secret below with the project
    cli("plan", "--out", plan_file)
    cli("apply", plan_file)
    (row,) = json.loads(
        cli("query", "--format", "json", f"SELECT count(*) AS n FROM {namespace}.t").stdout
    )
    assert row["n"] == 250
    assert "t" in json.dumps(json.loads(cli("status", "--json").stdout))
    cli("maintain", "--dry-run")
    cli("compile")

    # Read back: pyiceberg with its own keys (nothing vended), DuckDB from the metadata.
    table = s3_catalog.pyiceberg_catalog(vended=False).load_table((namespace, "t"))
    assert table.metadata_location.startswith(f"s3://{s3.bucket}/")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == list(range(250))
    con = duckdb_connection()
    create_s3_secret(con, s3_secret_options(s3.endpoint, key_id, secret.get_secret_value()))
    (count,) = con.execute(
        "SELECT count(*) FROM iceberg_scan(?)", [table.metadata_location]
    ).fetchone()  # type: ignore[misc]
    assert count == 250
    assert any(path.is_file() for path in events.rglob("*"))  # Spark's event log was written

    # The secret: in no output, no file under the project, no table property, not in
    # Spark's event log (job properties included: `register_catalog`); the key id (the
    # session store's is the word "tableflow") is not in the event log's properties.
    value = secret.get_secret_value()
    assert not any(value in text for text in outputs)
    for path in [*root.rglob("*"), *events.rglob("*")]:
        if path.is_file():
            assert value.encode() not in path.read_bytes(), path
    assert value not in json.dumps(table.properties)
    logged = "".join(p.read_text() for p in events.rglob("*") if p.is_file())
    assert f'"spark.sql.catalog.tf_s3_static.s3.access-key-id":"{key_id}"' not in logged
    assert s3_catalog.client_secret not in logged  # the catalog credential neither


def s3_secret_options(endpoint: str, key_id: str, secret: str) -> list[tuple[str, Any]]:
    return [
        ("KEY_ID", key_id),
        ("SECRET", secret),
        ("REGION", "us-east-1"),
        ("ENDPOINT", endpoint.split("://", 1)[1]),
        ("URL_STYLE", "path"),
        ("USE_SSL", False),
    ]
