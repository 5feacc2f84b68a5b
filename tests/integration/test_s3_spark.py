"""Spark writes and maintains an Iceberg table on S3 through the embedded REST catalog.

Iceberg's S3FileIO (runtime + AWS bundle of one version, from the jar cache) against the
S3 test server, behind the fault proxy so every S3 request is counted: CREATE TABLE,
three appends, MERGE INTO merge-on-read, rewrite_data_files, expire_snapshots and
remove_orphan_files listing S3. Spark is told only the catalog URL and its credential
(plus, without vending, the S3 keys); endpoint, path-style and region come from the
catalog. pyiceberg and DuckDB read the result independently, and neither S3 key nor
catalog secret is in Spark's event log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tableflow_core.dev.s3_server import RunningS3Server
from tableflow_core.jvm.artifacts import ensure, load_lock
from tests.fixtures.catalog import unique_namespace
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.support.fault_proxy import FaultProxy

REPO = Path(__file__).resolve().parents[2]
# ids 0..2999 appended; MERGE of 2900..3099: 50 even matches deleted, 50 odd updated,
# 100 inserted.
EXPECTED_ROWS = 3000 - 50 + 100
EXPECTED_SUM = sum(range(3000)) - sum(range(2900, 3000, 2)) + sum(range(3000, 3100))


def _run_scenario(
    server: S3CatalogServer,
    s3_server: RunningS3Server,
    vended: bool,
    event_log: Path,
    jars: list[Path] | None = None,
    **extra: object,
) -> dict:
    ns = unique_namespace("spark")
    request = {
        "catalog_uri": server.uri,
        "credential": server.credential,
        "vended": vended,
        "s3_keys": {} if vended else server.own_keys(),
        "namespace": ns,
        "event_log_dir": event_log.as_uri(),
        "jars": [str(p) for p in (jars or ensure(load_lock("iceberg-s3")).files)],
        **extra,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.s3_spark_scenario"],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(request) + "\n")
    process.stdin.flush()
    ready = json.loads(process.stdout.readline())
    location = ready["ready_for_orphans"]
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    orphans = [f"{prefix}/data/orphan-{uuid.uuid4().hex}.parquet", f"{prefix}/metadata/stray.avro"]
    three_days_ago = time.time() - 3 * 86400
    for key in orphans:
        s3_server.client().put_object(Bucket=bucket, Key=key, Body=b"not referenced")
        # s3proxy's filesystem store reports a file's mtime as LastModified: date the
        # strays back past remove_orphan_files' 24-hour floor.
        os.utime(s3_server.settings.blob_dir / bucket / key, (three_days_ago, three_days_ago))
    process.stdin.write("{}\n")
    process.stdin.flush()
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output
    result = json.loads(output.strip().splitlines()[-1])
    result["namespace"] = ns
    result["orphan_uris"] = [f"s3://{bucket}/{key}" for key in orphans]
    return result


def _requests_per_phase(proxy: FaultProxy, phases: dict[str, list[float]]) -> dict[str, dict]:
    counts: dict[str, dict] = {}
    for name, (start, end) in phases.items():
        inside = [r for r in proxy.requests if start <= r.at <= end]
        by_method: dict[str, int] = {}
        for r in inside:
            by_method[r.method] = by_method.get(r.method, 0) + 1
        counts[name] = {"seconds": round(end - start, 2), "requests": len(inside), **by_method}
    return counts


@pytest.mark.parametrize("vended", [True, False], ids=["vended-keys", "own-keys"])
def test_spark_writes_merges_and_maintains_a_table_on_s3(
    faulty_s3_catalog: tuple[S3CatalogServer, FaultProxy],
    s3_server: RunningS3Server,
    tmp_path: Path,
    vended: bool,
) -> None:
    server, proxy = faulty_s3_catalog
    event_log = tmp_path / "events"
    event_log.mkdir()
    result = _run_scenario(server, s3_server, vended, event_log)
    print(json.dumps(_requests_per_phase(proxy, result["phases"])))
    print({k: v for k, v in result.items() if k != "phases"})

    assert (result["rows"], result["sum_id"]) == (EXPECTED_ROWS, EXPECTED_SUM)
    assert result["updated_names"] == 150
    assert result["summary_batch"] == "2"
    assert result["delete_files_after_merge"] >= 1  # merge-on-read wrote position deletes
    assert result["rewritten_data_files"] >= 1
    assert result["snapshots_left"] == 1
    assert result["location"].startswith(server.warehouse + "/")
    assert set(result["orphan_uris"]) <= set(result["orphans_removed"])
    keys = [
        f"s3://{s3_server.bucket}/{item['Key']}"
        for page in s3_server.client()
        .get_paginator("list_objects_v2")
        .paginate(Bucket=s3_server.bucket, Prefix=result["location"].split("/", 3)[3] + "/")
        for item in page.get("Contents", [])
    ]
    assert not set(result["orphan_uris"]) & set(keys)

    # Independent readers, through the catalog.
    table = server.pyiceberg_catalog().load_table((result["namespace"], "events"))
    ids = table.scan().to_arrow()["id"].to_pylist()
    assert (len(ids), sum(ids)) == (EXPECTED_ROWS, EXPECTED_SUM)

    # No secret in Spark's event log (the redaction pattern is widened in the scenario).
    secrets = [server.client_secret, s3_server.credentials.secret_access_key.get_secret_value()]
    for path in event_log.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert not any(secret in text for secret in secrets), path
