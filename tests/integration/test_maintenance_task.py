"""`tableflow maintain` end to end: a project, the real catalog server, real Spark.

Dry run (no Spark), a real run under the table's lock that compacts and publishes the
new pointer, nothing due right after, and a table locked by an apply is left alone.
"""

from __future__ import annotations

import os
import time
import uuid
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
from tests.fixtures.lake import LAKES, Lake
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.integration.test_maintenance_spark import TOPIC, data_files, read_rows, small_commits

pytestmark = pytest.mark.slow
CATALOG = "tf_maintain_task"


def write_project(
    root: Path,
    server: CatalogServer | S3CatalogServer,
    namespace: str,
    sql_uri: str,
    catalog: str = CATALOG,
    storage: dict[str, Any] | None = None,
    maintenance: dict[str, Any] | None = None,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    target = {
        "kafka": {"bootstrap_servers": "127.0.0.1:1"},
        "catalog": {
            "type": "rest",
            "name": catalog,
            "uri": server.uri,
            "credential": server.credential,
            "properties": {
                "oauth2-server-uri": server.uri + "/v1/oauth/tokens",
                "scope": "catalog",
            },
            **({"storage": storage} if storage else {}),
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
            "maintenance": {
                "every": "1h",
                "compact": {"min_input_files": 2},
                **(maintenance or {}),
            },
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


@LAKES
def test_maintain_dry_run_then_run_under_the_lock_and_publish(
    tmp_path: Path, spark: Any, lake: Lake
) -> None:
    """On the file warehouse and on S3: compaction, manifest rewrite, snapshot expiry and
    orphan removal (S3: listed by S3FileIO with `prefix_listing`), then the publish."""
    namespace = unique_namespace("mtask")
    spark_catalog = f"{CATALOG}_{lake.kind}"
    if isinstance(lake.server, S3CatalogServer):
        register_catalog(spark, spark_catalog, lake.server.spark_properties(vended=True))
    else:
        register_catalog(spark, spark_catalog, lake.server.spark_properties())
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {spark_catalog}.{namespace}")
    small_commits(spark, f"{spark_catalog}.{namespace}.orders", 6)
    sql_uri = f"sqlite:///{tmp_path / 'lake.db'}"
    root = write_project(
        tmp_path / "project",
        lake.server,
        namespace,
        sql_uri,
        catalog=spark_catalog,
        storage=lake.storage,
        maintenance={
            "expire_snapshots": {"older_than": "0s", "retain_last": 1},
            "remove_orphans": {"older_than": "2d"},
        },
    )
    catalog = lake.pyiceberg_catalog()
    name = f"{namespace}.orders"
    assert data_files(catalog, name) == 12
    rows = read_rows(catalog, name)
    orphans = plant_orphans(lake, catalog.load_table(name).metadata.location, days_old=3)

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
    assert [r.operation for r in done.report.results] == [
        "compact",
        "rewrite_manifests",
        "expire_snapshots",
        "remove_orphans",
    ]
    assert data_files(catalog, name) == 2
    assert read_rows(catalog, name) == rows
    loaded = catalog.load_table(name)
    assert len(loaded.metadata.snapshots) == 1  # expired down to the last
    removed = next(r for r in done.report.results if r.operation == "remove_orphans")
    assert removed.metrics.get("orphan_files_removed", 0) >= len(orphans), removed
    assert not any(Path(orphan).exists() for orphan in orphans)  # S3: s3proxy's files
    assert read_committed_offsets(loaded, TOPIC).offsets == {0: 30, 1: 30}  # type: ignore[union-attr]
    # The maintenance commit was published: the SQL catalog points at the current metadata.
    assert done.published is not None and done.published.ok
    # The SQL catalog's reader needs the files' access too (on S3: the vended keys).
    access = {k: v for k, v in loaded.io.properties.items() if k.startswith(("s3.", "client."))}
    sql_catalog = load_catalog(
        "lake", type="sql", uri=sql_uri, warehouse=(root / "wh").as_uri(), **access
    )
    published = sql_catalog.load_table(name)
    assert published.metadata_location == loaded.metadata_location
    assert published.scan().to_arrow().num_rows == rows[0]

    again = CliRunner().invoke(cli, ["--project-dir", str(root), "maintain", "-s", "orders"])
    assert again.exit_code == 0, again.output
    assert "orders: nothing due" in again.output


def plant_orphans(lake: Lake, location: str, days_old: int) -> list[str]:
    """Files under the table's data/ and metadata/ that no snapshot references, dated
    `days_old` back (past remove_orphans' floor), as a crashed writer leaves them."""
    when = time.time() - days_old * 86400
    names = [f"data/orphan-{uuid.uuid4().hex}.parquet", "metadata/stray-orphan.avro"]
    paths = []
    for name in names:
        if isinstance(lake.server, S3CatalogServer):
            store = lake.server.s3
            key = f"{location.removeprefix(f's3://{store.bucket}/')}/{name}"
            store.client().put_object(Bucket=store.bucket, Key=key, Body=b"not referenced")
            # s3proxy's filesystem store reports the file's mtime as LastModified.
            path = store.settings.blob_dir / store.bucket / key
        else:
            path = Path(location.removeprefix("file:")) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"not referenced")
        os.utime(path, (when, when))
        paths.append(str(path))
    return paths
