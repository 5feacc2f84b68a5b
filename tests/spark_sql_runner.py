"""Runs SQL statements in a Spark session of its own (its own jars), JSON in, JSON out.

`python -m tests.spark_sql_runner` reads one JSON request line on stdin:
{"conf": {spark conf}, "statements": ["SQL", ...], "master": "local[2]",
"collect_errors": false}; secrets travel there (catalog credentials, S3 keys), never on
the command line. It prints one JSON line: {"results": [rows of each statement],
"seconds": [...], "session_seconds": s}. With `collect_errors` a failing statement's
result is {"error": "<exception class>: <first lines>"} and the next one runs.
Rows are lists of JSON values: decimals as strings, timestamps and dates in ISO form,
binary as hex, structs as objects, maps as [key, value] pairs.

A session cannot change its jars once started, and the test run's shared session carries
other ones: Iceberg 1.12.0 with the AWS bundle (S3), delta-spark, hadoop-aws each need
their own JVM. `run_spark_sql(...)` is the test side.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# Spark's default pattern misses `credential` (REST catalogs' client secret) and
# `access-key` (S3 key ids).
REDACTION_REGEX = "(?i)secret|password|token|access[.]?key|access-key|credential"
BASE_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "768m",
    "spark.redaction.regex": REDACTION_REGEX,
}


def to_json_value(value: Any) -> Any:
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: to_json_value(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return [[to_json_value(k), to_json_value(v)] for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    return value


def main() -> int:
    request = json.loads(sys.stdin.readline())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    started = time.monotonic()
    builder = SparkSession.builder.master(request.get("master", "local[2]")).appName("sql-runner")
    for key, value in {**BASE_CONF, **request["conf"]}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    session_seconds = time.monotonic() - started
    results: list[Any] = []
    seconds: list[float] = []
    try:
        for statement in request["statements"]:
            begun = time.monotonic()
            try:
                rows = spark.sql(statement).collect()
            except Exception as exc:
                if not request.get("collect_errors"):
                    raise
                # py4j's first line is generic; the Java exception follows it.
                head = " ".join(str(exc).strip().splitlines()[:3])
                results.append({"error": f"{type(exc).__name__}: {head}"[:1500]})
            else:
                results.append([[to_json_value(v) for v in row] for row in rows])
            seconds.append(round(time.monotonic() - begun, 3))
    finally:
        spark.stop()
    print(
        json.dumps(
            {"results": results, "seconds": seconds, "session_seconds": round(session_seconds, 3)}
        ),
        flush=True,
    )
    return 0


def run_spark_sql(
    conf: Mapping[str, str],
    statements: Sequence[str],
    timeout: float = 900.0,
    env: Mapping[str, str] | None = None,
    collect_errors: bool = False,
) -> dict[str, Any]:
    """Run `statements` in a new Spark process with `conf`; its result document."""
    request = {"conf": dict(conf), "statements": list(statements), "collect_errors": collect_errors}
    process = subprocess.run(
        [sys.executable, "-m", "tests.spark_sql_runner"],
        cwd=REPO,
        input=json.dumps(request) + "\n",
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if process.returncode != 0:
        causes = [
            line.strip()[:400]
            for line in process.stderr.splitlines()
            if ("Exception" in line or "Error" in line) and not line.strip().startswith("at ")
        ]
        raise AssertionError(
            f"Spark SQL runner failed (exit {process.returncode}):\n"
            + "\n".join(dict.fromkeys(causes[:12]))
            + f"\n--- stderr tail ---\n{process.stderr[-1500:]}"
        )
    return dict(json.loads(process.stdout.strip().splitlines()[-1]))


def iceberg_rest_conf(
    catalog: str,
    uri: str,
    jars: Sequence[Path],
    credential: str | None = None,
    token_uri: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Spark conf for an Iceberg REST catalog named `catalog` (jars: runtime + AWS bundle)."""
    prefix = f"spark.sql.catalog.{catalog}"
    conf = {
        "spark.jars": ",".join(str(j) for j in jars),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest",
        f"{prefix}.uri": uri,
        f"{prefix}.cache-enabled": "false",
        "spark.driver.extraJavaOptions": CHECKSUM_OPTIONS,
    }
    if credential:
        conf.update(
            {
                f"{prefix}.rest.auth.type": "oauth2",
                f"{prefix}.credential": credential,
                f"{prefix}.oauth2-server-uri": token_uri or uri.rstrip("/") + "/v1/oauth/tokens",
                f"{prefix}.scope": "catalog",
            }
        )
    for key, value in (extra or {}).items():
        conf[f"{prefix}.{key}"] = value
    return conf


# AWS SDK 2.30+ checksum trailers (apache/iceberg#14439); harmless for s3proxy.
CHECKSUM_OPTIONS = (
    "-Daws.requestChecksumCalculation=when_required -Daws.responseChecksumValidation=when_required"
)

if __name__ == "__main__":
    sys.exit(main())
