"""`tableflow apply` on S3 while the object store fails, slows down or the driver is killed.

The project's tables live on S3 behind the fault proxy (the S3 catalog server writes its
metadata through it too, and hands its address to Spark and pyiceberg). Each case ends
with the table read back by pyiceberg: every record exactly once, nothing published by
a failed run, and what a killed run left behind removed by `maintain`
(expire_snapshots, then remove_orphans listing S3).
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from pyiceberg.exceptions import NoSuchTableError

from tableflow_core.config.loader import load_project
from tableflow_core.tasks.apply import ApplyTask
from tableflow_core.tasks.maintain import MaintainTask
from tableflow_core.tasks.plan import PlanTask
from tests.fixtures.apply_env import REPO, run_cli_apply
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.lake import Lake
from tests.fixtures.projects import project_writer
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer, unique_name
from tests.support.fault_proxy import Fault, FaultProxy
from tests.unit.test_engine_helpers import produce_avro

pytestmark = pytest.mark.slow

CATALOG = "tf_s3_faults"
# Few, quick retries (Iceberg's S3FileIO defaults wait up to 20 s between 5), and multipart
# uploads from 5 MiB (the S3 minimum part) so one run's data file is uploaded in parts.
CLIENT_PROPERTIES = {
    "s3.retry.num-retries": "1",
    "s3.retry.min-wait-ms": "100",
    "s3.retry.max-wait-ms": "500",
    "s3.multipart.part-size-bytes": str(5 * 1024 * 1024),
    "s3.multipart.threshold": "1.0",
}
DATA_PUT = r"/data/.*\.parquet$"


@dataclass
class Project:
    """A project with one table `t` reading `topic`, on the catalog behind `proxy`."""

    root: Path
    server: S3CatalogServer
    proxy: FaultProxy
    namespace: str
    kafka: KafkaBroker
    registry: SchemaRegistryServer
    topic: str
    partitions: int

    def produce(self, rows: list[dict[str, Any]]) -> None:
        produce_avro(self.kafka.bootstrap, self.registry.url, self.topic, rows, self.partitions)

    def apply(self, spark: Any) -> Any:
        project = load_project(self.root)
        plan = PlanTask(project, project.tables).run()
        assert not plan.blockers, plan.blockers
        (result,) = ApplyTask(project, plan, spark=spark).run().tables
        return result

    def table(self) -> Any:
        return self.server.pyiceberg_catalog().load_table((self.namespace, "t"))

    def ids(self) -> list[int]:
        """The table's ids, sorted ([] when the table was never created)."""
        try:
            table = self.table()
        except NoSuchTableError:
            return []
        return sorted(table.scan().to_arrow()["id"].to_pylist())

    def data_objects(self) -> set[str]:
        """Every object under the table's data/ prefix, as s3:// URIs."""
        store = self.server.s3
        location = self.table().metadata.location
        prefix = location.removeprefix(f"s3://{store.bucket}/") + "/data/"
        pages = (
            store.client()
            .get_paginator("list_objects_v2")
            .paginate(Bucket=store.bucket, Prefix=prefix)
        )
        return {
            f"s3://{store.bucket}/{item['Key']}"
            for page in pages
            for item in page.get("Contents", [])
        }

    def live_data_files(self) -> set[str]:
        return set(self.table().inspect.files()["file_path"].to_pylist())

    def age_every_object(self, days: float) -> None:
        """Date the table's objects back (s3proxy reports a file's mtime as LastModified)."""
        store = self.server.s3
        location = self.table().metadata.location.removeprefix(f"s3://{store.bucket}/")
        when = time.time() - days * 86400
        for path in (store.settings.blob_dir / store.bucket / location).rglob("*"):
            os.utime(path, (when, when))


@pytest.fixture
def faulty_project(
    tmp_path: Path,
    faulty_s3_catalog: tuple[S3CatalogServer, FaultProxy],
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistryServer,
) -> Callable[[int], Project]:
    """`faulty_project(partitions)`: a project on a new topic of that many partitions,
    its S3 client set to retry little and to upload large files in parts."""
    server, proxy = faulty_s3_catalog

    def make(partitions: int) -> Project:
        topic = kafka_broker.create_topic(unique_name("s3f"), partitions)
        namespace = unique_namespace("s3f")
        write = project_writer(
            tmp_path, kafka_broker, schema_registry.url, Lake.vended(server, CATALOG)
        )
        root = write(
            namespace=namespace, tables=[{"name": "t", "topic": topic, "metadata_columns": []}]
        )
        edit_project(
            root,
            lambda config: config["targets"]["test"]["catalog"]["properties"].update(
                CLIENT_PROPERTIES
            ),
        )
        return Project(
            root, server, proxy, namespace, kafka_broker, schema_registry, topic, partitions
        )

    return make


def edit_project(root: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = root / "tableflow_project.yml"
    config = yaml.safe_load(path.read_text())
    change(config)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def records(start: int, count: int, name_bytes: int = 6) -> list[dict[str, Any]]:
    return [
        {"id": i, "name": base64.b64encode(os.urandom(name_bytes)).decode(), "amount": i / 4}
        for i in range(start, start + count)
    ]


def test_store_errors_and_resets_mid_apply_publish_nothing_and_a_rerun_is_exact(
    spark: Any, faulty_project: Callable[[int], Project]
) -> None:
    project = faulty_project(2)
    proxy = project.proxy
    project.produce(records(0, 300))

    # 1. The store answers 503 to every data file upload: the run fails and says where.
    refusal = proxy.add_fault(Fault("status", method="PUT", path=DATA_PUT, status=503, times=None))
    failed = project.apply(spark)
    proxy.clear_faults()
    assert refusal.hits >= 2  # the S3 client retried
    assert failed.status == "error"
    assert f"object store at {proxy.endpoint}" in (failed.error or ""), failed.error
    # Spark's AWS SDK names the status (503); pyarrow's S3 client, which writes a plain
    # append run's data files, names it by its S3 error code (SLOW_DOWN).
    assert "table t" in (failed.error or "")
    assert "503" in (failed.error or "") or "SLOW_DOWN" in (failed.error or ""), failed.error
    assert project.ids() == []  # the table was created; nothing was published

    # 2. Connections reset on every upload: same outcome.
    resets = proxy.add_fault(Fault("reset", method="PUT", path=DATA_PUT, times=None))
    failed = project.apply(spark)
    proxy.clear_faults()
    assert resets.hits >= 2 and failed.status == "error"
    assert f"object store at {proxy.endpoint}" in (failed.error or ""), failed.error
    assert project.ids() == []

    # 3. The store applies an upload but its answer is lost (the client retries the same
    # key: one retry is allowed here), and answers slowly: the run succeeds, every
    # record once.
    lost = proxy.add_fault(Fault("reset-after", method="PUT", path=DATA_PUT, times=1))
    slow = proxy.add_fault(Fault("delay", method="PUT", path=DATA_PUT, seconds=1.5, times=2))
    done = project.apply(spark)
    proxy.clear_faults()
    assert done.status == "success", done.error
    assert lost.hits == 1 and slow.hits >= 1
    assert project.ids() == list(range(300))

    project.produce(records(300, 20))
    assert project.apply(spark).status == "success"
    assert project.ids() == list(range(320))


def test_kill_9_during_a_multipart_upload_and_before_the_commit_then_rerun_and_clean_up(
    spark: Any, faulty_project: Callable[[int], Project]
) -> None:
    project = faulty_project(1)
    proxy = project.proxy
    # ~12 MB of incompressible names in one partition: one data file of several parts.
    big = 100_000
    project.produce(records(0, big, 90))

    # 1. kill -9 while a part of the data file is being uploaded.
    # (Only the data file's parts: the catalog's pyarrow writes metadata files as
    # multipart uploads too.)
    proxy.add_fault(
        Fault("delay", method="PUT", path=DATA_PUT, query=r"partNumber=", seconds=30, times=None)
    )
    since = time.time()
    apply = subprocess.Popen(
        [sys.executable, "-m", "tableflow_core", "--project-dir", str(project.root), "apply",
         "--auto-approve"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.time() + 240
        while not any(
            r.method == "POST" and "uploads" in r.query and "/data/" in r.path and r.at >= since
            for r in proxy.requests
        ):
            assert apply.poll() is None, apply.communicate()[0][-3000:]
            assert time.time() < deadline, "no multipart upload started"
            time.sleep(0.2)
        time.sleep(1.0)  # a part is on its way (held by the proxy)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(apply.pid, signal.SIGKILL)
        apply.communicate(timeout=60)
    proxy.clear_faults()
    assert apply.returncode == -signal.SIGKILL
    assert project.ids() == []  # nothing published

    # 2. Re-run: every record once.
    done = project.apply(spark)
    assert done.status == "success", done.error
    assert project.ids() == list(range(big))

    # 3. kill -9 after the write, before the catalog commit that publishes it.
    project.produce(records(big, 50))
    run_cli_apply(SimpleNamespace(root=project.root), crash_at="before_commit")  # type: ignore[arg-type]
    assert project.ids() == list(range(big))
    assert project.data_objects() - project.live_data_files()  # the killed run's files
    done = project.apply(spark)
    assert done.status == "success", done.error
    assert project.ids() == list(range(big + 50))

    # 4. What the killed runs left is removed by maintenance, on S3: expired snapshots'
    # files by expire_snapshots, the unreferenced ones by remove_orphans (S3 listing).
    edit_project(
        project.root,
        lambda config: config["defaults"].update(
            maintenance={
                "every": "1h",
                "expire_snapshots": {"older_than": "0s", "retain_last": 1, "keep_files_for": "0s"},
                "remove_orphans": {"older_than": "2d"},
            }
        ),
    )
    project.age_every_object(days=3)
    loaded = load_project(project.root)
    (maintained,) = MaintainTask(loaded, loaded.tables, spark=spark).run()
    assert maintained.ok, maintained
    assert project.data_objects() == project.live_data_files()
    assert project.ids() == list(range(big + 50))
