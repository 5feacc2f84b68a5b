"""`tableflow maintain` end to end: a project, the real catalog server, real Spark.

Dry run (no Spark), a real run under the table's lock that compacts and publishes the
new pointer, nothing due right after, and a table locked by an apply is left alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from pyiceberg.catalog import load_catalog

from tableflow_core.cli.main import cli
from tableflow_core.config.loader import load_project
from tableflow_core.engine.spark_session import register_catalog
from tableflow_core.runner.lock import table_locks
from tableflow_core.state.offsets import read_committed_offsets
from tableflow_core.tasks.maintain import MaintainTask
from tests.fixtures.catalog import CatalogServer, unique_namespace
from tests.integration.test_maintenance_spark import TOPIC, data_files, read_rows, small_commits

pytestmark = pytest.mark.slow
CATALOG = "tf_maintain_task"


def write_project(root: Path, server: CatalogServer, namespace: str, sql_uri: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    target = {
        "kafka": {"bootstrap_servers": "127.0.0.1:1"},
        "catalog": {
            "type": "rest",
            "name": CATALOG,
            "uri": server.uri,
            "credential": server.credential,
            "properties": {
                "oauth2-server-uri": server.uri + "/v1/oauth/tokens",
                "scope": "catalog",
            },
        },
        "publish_catalogs": {
            "lake": {"type": "sql", "uri": sql_uri, "warehouse": (root / "wh").as_uri()}
        },
        "spark": {"master": "local[2]"},
    }
    project = {
        "name": "shop",
        "default_target": "test",
        "targets": {"test": target},
        "defaults": {
            "namespace": namespace,
            "maintenance": {"every": "1h", "compact": {"min_input_files": 2}},
        },
        "tables": [
            {
                "name": "orders",
                "topic": TOPIC,
                "value": {"format": "json"},
                "publish_to": ["lake"],
                "maintenance": {"rewrite_manifests": True},
            },
            {"name": "absent", "topic": "other", "value": {"format": "json"}},
        ],
    }
    (root / "tableflow_project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
    return root


def test_maintain_dry_run_then_run_under_the_lock_and_publish(
    tmp_path: Path, spark: Any, catalog_server: CatalogServer
) -> None:
    namespace = unique_namespace("mtask")
    register_catalog(spark, CATALOG, catalog_server.spark_properties())
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{namespace}")
    small_commits(spark, f"{CATALOG}.{namespace}.orders", 6)
    sql_uri = f"sqlite:///{tmp_path / 'lake.db'}"
    root = write_project(tmp_path / "project", catalog_server, namespace, sql_uri)
    catalog = catalog_server.pyiceberg_catalog()
    name = f"{namespace}.orders"
    assert data_files(catalog, name) == 12
    rows = read_rows(catalog, name)

    dry = CliRunner().invoke(cli, ["--project-dir", str(root), "maintain", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert (
        "due: compact on orders (every 1h, 10 commits or 20 small files; never run)" in dry.output
    )
    assert "due: rewrite_manifests on orders" in dry.output
    assert "absent: table does not exist yet" in dry.output
    assert data_files(catalog, name) == 12  # the dry run changed nothing

    project = load_project(root)
    orders = project.table("orders")
    with table_locks(project.root / "target" / "locks", ["orders"], command="tableflow apply"):
        (locked,) = MaintainTask(project, (orders,), spark=spark).run()
    assert not locked.ok and "locked by" in (locked.error or "")
    assert data_files(catalog, name) == 12

    (done,) = MaintainTask(project, (orders,), spark=spark).run()
    assert done.ok, done
    assert done.report is not None
    assert [r.operation for r in done.report.results] == ["compact", "rewrite_manifests"]
    assert data_files(catalog, name) == 2
    assert read_rows(catalog, name) == rows
    loaded = catalog.load_table(name)
    assert read_committed_offsets(loaded, TOPIC).offsets == {0: 30, 1: 30}  # type: ignore[union-attr]
    # The maintenance commit was published: the SQL catalog points at the current metadata.
    assert done.published is not None and done.published.ok
    lake = load_catalog("lake", type="sql", uri=sql_uri, warehouse=(root / "wh").as_uri())
    published = lake.load_table(name)
    assert published.metadata_location == loaded.metadata_location
    assert published.scan().to_arrow().num_rows == rows[0]

    again = CliRunner().invoke(cli, ["--project-dir", str(root), "maintain", "-s", "orders"])
    assert again.exit_code == 0, again.output
    assert "orders: nothing due" in again.output
