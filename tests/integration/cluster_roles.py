"""What the test hosts of test_cluster_hosts.py run inside their network namespaces.

    python -m tests.integration.cluster_roles data --host ADDR --dir DIR --out FILE
    python -m tests.integration.cluster_roles produce --servers FILE --topic T --count N
    python -m tests.integration.cluster_roles watch --ui http://DRIVER:4040
    python -m tests.integration.cluster_roles read --servers FILE --prefix P --table T

Each role runs on one host (`ip netns exec`), so it reaches the others only over the
test network, never through the machine's loopback. S3 keys come in the environment
(`CLUSTER_S3_ACCESS_KEY_ID`, `CLUSTER_S3_SECRET_ACCESS_KEY`) and so does the registry's
password (`CLUSTER_REGISTRY_PASSWORD`), never on a command line.
Every role prints one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from tableflow_core.dev.kafka_server import KafkaServerSettings, start_kafka
from tableflow_core.dev.processes import free_port
from tableflow_core.dev.producer import produce_sample
from tableflow_core.dev.registry import registry_url, start_registry
from tableflow_core.dev.s3_server import S3Credentials, S3ServerSettings, s3_client, start_s3_server
from tableflow_core.readers.duckdb_reader import create_s3_secret, duckdb_connection

KEY_ID_ENV = "CLUSTER_S3_ACCESS_KEY_ID"
SECRET_ENV = "CLUSTER_S3_SECRET_ACCESS_KEY"
REGISTRY_PASSWORD_ENV = "CLUSTER_REGISTRY_PASSWORD"
REGISTRY_USER = "tableflow"
REGION = "us-east-1"
BUCKET = "warehouse"


def credentials() -> S3Credentials:
    return S3Credentials(os.environ[KEY_ID_ENV], SecretStr(os.environ[SECRET_ENV]))


def data(host: str, directory: Path, out: Path) -> None:
    """Kafka (KRaft), the schema registry and s3proxy, all bound to `host`; then wait."""
    registry_port = free_port(host)
    # Off loopback the registry refuses to run without authentication.
    start_registry(
        host,
        registry_port,
        directory / "registry.db",
        directory / "registry.log",
        basic_auth_user=REGISTRY_USER,
        basic_auth_password=os.environ[REGISTRY_PASSWORD_ENV],
    )
    s3 = start_s3_server(
        S3ServerSettings(
            data_dir=directory / "s3", host=host, bucket=BUCKET, credentials=credentials()
        )
    )
    kafka = start_kafka(KafkaServerSettings(data_dir=directory / "kafka", host=host), timeout=120)
    servers = {
        "bootstrap": kafka.bootstrap,
        "registry": registry_url(host, registry_port),
        "s3": s3.endpoint,
    }
    out.write_text(json.dumps(servers))
    print(json.dumps(servers), flush=True)
    while True:  # the test network's teardown kills this host's processes
        signal.pause()


def produce(servers: dict[str, str], topic: str, count: int, partitions: int, seed: int) -> None:
    registry_auth = f"{REGISTRY_USER}:{os.environ[REGISTRY_PASSWORD_ENV]}"
    result = produce_sample(
        "orders",
        servers["bootstrap"],
        servers["registry"],
        topic,
        count,
        partitions,
        seed=seed,
        registry_config={"basic.auth.user.info": registry_auth},
    )
    print(json.dumps({"records": result.records, "per_partition": result.per_partition}))


def watch(ui: str, timeout: float) -> None:
    """Print the host of the first executor seen running a task of a tableflow job (not
    the Python warm-up), read from the driver's REST API (its web UI). Then follow that job's
    stages until the application ends and print their task attempts: host, status, error."""
    deadline = time.monotonic() + timeout
    base, job = _first_busy_executor(ui, deadline)
    if base is None or job is None:
        print(json.dumps({"host": None}), flush=True)
        return
    attempts: dict[int, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        try:
            (current,) = [j for j in _get(f"{base}/jobs") if j["jobId"] == job["jobId"]]
            for stage_id in current["stageIds"]:
                for stage in _get(f"{base}/stages/{stage_id}?details=true"):
                    for task in stage.get("tasks", {}).values():
                        attempts[int(task["taskId"])] = {
                            "index": task["index"],
                            "attempt": task["attempt"],
                            "host": task["host"],
                            "status": task["status"],
                            "error": task.get("errorMessage", "")[:300],
                        }
            if current["status"] != "RUNNING":
                break
        except (OSError, ValueError, KeyError, urllib.error.URLError):
            break  # the application ended: its UI is gone
        time.sleep(0.2)
    print(json.dumps({"tasks": [attempts[t] for t in sorted(attempts)]}), flush=True)


def _first_busy_executor(ui: str, deadline: float) -> tuple[str | None, dict[str, Any] | None]:
    """The first task of a running tableflow job seen RUNNING: print its host."""
    while time.monotonic() < deadline:
        try:
            (app,) = _get(f"{ui}/api/v1/applications")
            base = f"{ui}/api/v1/applications/{app['id']}"
            for job in _get(f"{base}/jobs?status=running"):
                if not str(job.get("jobGroup", "")).startswith("tableflow:"):
                    continue
                for stage_id in job["stageIds"]:
                    for stage in _get(f"{base}/stages/{stage_id}?details=true"):
                        for task in stage.get("tasks", {}).values():
                            if task["status"] == "RUNNING":
                                found = {"host": task["host"], "job": job["name"]}
                                print(json.dumps(found), flush=True)
                                return base, job
        except (OSError, ValueError, KeyError, urllib.error.URLError):
            pass  # the driver's UI is not up yet (or slow: a loaded machine's answers
            # took over 2 s, and the suite once saw no running task in an 18 s job)
        time.sleep(0.05)
    return None, None


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def read(servers: dict[str, str], prefix: str, table: str) -> None:
    """The table as an independent reader sees it: DuckDB on the newest metadata file
    found by listing the bucket (no catalog, no Spark, no tableflow write code)."""
    keys = credentials()
    client = s3_client(servers["s3"], keys, REGION)
    names = [
        item["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        for item in page.get("Contents", [])
    ]
    metadata = [k for k in names if f"/{table}/metadata/" in k and k.endswith(".metadata.json")]
    newest = max(metadata, key=lambda k: int(k.rsplit("/", 1)[1].split("-", 1)[0]))
    con = duckdb_connection()
    create_s3_secret(
        con,
        [
            ("KEY_ID", keys.access_key_id),
            ("SECRET", keys.secret_access_key.get_secret_value()),
            ("REGION", REGION),
            ("ENDPOINT", servers["s3"].removeprefix("http://")),
            ("URL_STYLE", "path"),
            ("USE_SSL", False),
        ],
    )
    rows = con.execute(
        "SELECT _kafka_partition, _kafka_offset, order_id FROM iceberg_scan(?)",
        [f"s3://{BUCKET}/{newest}"],
    ).fetchall()
    positions = Counter((int(p), int(o)) for p, o, _ in rows)
    print(
        json.dumps(
            {
                "rows": len(rows),
                "positions": sorted([p, o, n] for (p, o), n in positions.items()),
                "order_ids": sorted(str(order_id) for _, _, order_id in rows),
                "data_files": sum(1 for k in names if k.endswith(".parquet")),
            }
        )
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="cluster_roles")
    roles = parser.add_subparsers(dest="role", required=True)
    data_role = roles.add_parser("data")
    data_role.add_argument("--host", required=True)
    data_role.add_argument("--dir", type=Path, required=True)
    data_role.add_argument("--out", type=Path, required=True)
    produce_role = roles.add_parser("produce")
    produce_role.add_argument("--servers", type=Path, required=True)
    produce_role.add_argument("--topic", required=True)
    produce_role.add_argument("--count", type=int, required=True)
    produce_role.add_argument("--partitions", type=int, default=4)
    produce_role.add_argument("--seed", type=int, default=0)
    watch_role = roles.add_parser("watch")
    watch_role.add_argument("--ui", required=True)
    watch_role.add_argument("--timeout", type=float, default=300)
    read_role = roles.add_parser("read")
    read_role.add_argument("--servers", type=Path, required=True)
    read_role.add_argument("--prefix", required=True)
    read_role.add_argument("--table", required=True)
    args = parser.parse_args(argv)
    if args.role == "data":
        data(args.host, args.dir, args.out)
    elif args.role == "produce":
        servers = json.loads(args.servers.read_text())
        produce(servers, args.topic, args.count, args.partitions, args.seed)
    elif args.role == "watch":
        watch(args.ui, args.timeout)
    else:
        read(json.loads(args.servers.read_text()), args.prefix, args.table)


if __name__ == "__main__":
    main(sys.argv[1:])
