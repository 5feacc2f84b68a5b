"""Spark + Iceberg S3FileIO through the REST catalog, end to end, in its own JVM.

Run by tests/integration/test_s3_spark.py as `python -m tests.integration.s3_spark_scenario` with a JSON
request on stdin (secrets travel there, never on the command line) and one JSON result
line on stdout. Its own process because the session needs the Iceberg runtime and AWS
bundle of one version (tableflow_core.jvm.artifacts, lock `iceberg-s3`), where the test run's shared
session carries the runtime from PyPI, and a JVM's jars cannot change once started.

Protocol: one JSON request line on stdin {"catalog_uri", "credential", "vended",
"s3_keys" (FileIO properties when not vended), "namespace", "event_log_dir", "jars",
"checksum_workaround"}; the script prints {"ready_for_orphans": <table location>} and
waits for one more stdin line (the test puts stray objects there meanwhile); the last
stdout line is the result {"phases": {name: [start, end]}, "rows", "sum_id", ...}.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

# AWS SDK 2.30+ adds CRC checksums (trailers) to uploads unless told otherwise;
# Iceberg's s3.checksum-enabled does not stop it (apache/iceberg#14439).
CHECKSUM_OPTIONS = (
    "-Daws.requestChecksumCalculation=when_required -Daws.responseChecksumValidation=when_required"
)
# Spark's default redaction pattern misses `credential` (the REST catalog's client
# secret) and `access-key` (the S3 key id).
REDACTION_REGEX = "(?i)secret|password|token|access[.]?key|access-key|credential"


def main() -> int:
    request = json.loads(sys.stdin.readline())
    phases: dict[str, list[float]] = {}
    result: dict[str, Any] = {"phases": phases}

    def phase(name: str) -> Any:
        class _Phase:
            def __enter__(self) -> None:
                phases[name] = [time.time(), 0.0]

            def __exit__(self, *exc: object) -> None:
                phases[name][1] = time.time()

        return _Phase()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    catalog = "lake"
    conf: dict[str, str] = {
        "spark.jars": ",".join(request["jars"]),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        f"spark.sql.catalog.{catalog}": "org.apache.iceberg.spark.SparkCatalog",
        f"spark.sql.catalog.{catalog}.type": "rest",
        f"spark.sql.catalog.{catalog}.uri": request["catalog_uri"],
        f"spark.sql.catalog.{catalog}.cache-enabled": "false",
        f"spark.sql.catalog.{catalog}.rest.auth.type": "oauth2",
        f"spark.sql.catalog.{catalog}.credential": request["credential"],
        f"spark.sql.catalog.{catalog}.oauth2-server-uri": request["catalog_uri"]
        + "/v1/oauth/tokens",
        f"spark.sql.catalog.{catalog}.scope": "catalog",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": request["event_log_dir"],
        "spark.redaction.regex": request.get("redaction_regex", REDACTION_REGEX),
    }
    if request["vended"]:
        conf[f"spark.sql.catalog.{catalog}.header.X-Iceberg-Access-Delegation"] = (
            "vended-credentials"
        )
    for key, value in request.get("s3_keys", {}).items():
        conf[f"spark.sql.catalog.{catalog}.{key}"] = value
    if request.get("checksum_workaround", True):
        conf["spark.driver.extraJavaOptions"] = CHECKSUM_OPTIONS
        conf["spark.executor.extraJavaOptions"] = CHECKSUM_OPTIONS

    with phase("session"):
        builder = SparkSession.builder.master("local[2]").appName("s3-scenario")
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    ns = request["namespace"]
    table = f"{catalog}.{ns}.events"
    try:
        with phase("create"):
            spark.sql(f"CREATE NAMESPACE {catalog}.{ns}")
            spark.sql(
                f"CREATE TABLE {table} (id BIGINT, name STRING, part INT) USING iceberg "
                "PARTITIONED BY (part) TBLPROPERTIES ('format-version'='2', "
                "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
                "'write.merge.mode'='merge-on-read')"
            )
        for batch in range(3):
            frame = spark.range(batch * 1000, (batch + 1) * 1000).selectExpr(
                "id", "concat('n', cast(id as string)) as name", "cast(id % 4 as int) as part"
            )
            with phase(f"append{batch}"):
                frame.writeTo(table).option(
                    "snapshot-property.tableflow.batch", str(batch)
                ).append()
        with phase("merge"):
            spark.range(2900, 3100).selectExpr(
                "id", "concat('m', cast(id as string)) as name", "cast(id % 4 as int) as part"
            ).createOrReplaceTempView("changes")
            spark.sql(
                f"MERGE INTO {table} t USING changes s ON t.id = s.id "
                "WHEN MATCHED AND s.id % 2 = 0 THEN DELETE "
                "WHEN MATCHED THEN UPDATE SET t.name = s.name "
                "WHEN NOT MATCHED THEN INSERT *"
            )
        result["delete_files_after_merge"] = spark.sql(
            f"SELECT count(*) FROM {table}.delete_files"
        ).collect()[0][0]
        result["summary_batch"] = spark.sql(
            f"SELECT summary['tableflow.batch'] FROM {table}.snapshots "
            "WHERE operation = 'append' ORDER BY committed_at DESC LIMIT 1"
        ).collect()[0][0]
        with phase("rewrite_data_files"):
            rewritten = spark.sql(
                f"CALL {catalog}.system.rewrite_data_files(table => '{ns}.events', "
                "options => map('min-input-files', '1', 'delete-file-threshold', '1'))"
            ).collect()[0]
            result["rewritten_data_files"] = int(rewritten[0])
        with phase("rewrite_position_delete_files"):
            spark.sql(
                f"CALL {catalog}.system.rewrite_position_delete_files(table => '{ns}.events', "
                "options => map('rewrite-all', 'true'))"
            ).collect()
        with phase("expire_snapshots"):
            expired = spark.sql(
                f"CALL {catalog}.system.expire_snapshots(table => '{ns}.events', "
                f"older_than => TIMESTAMP '{_ts(datetime.now(UTC))}', retain_last => 1)"
            ).collect()[0]
            result["expired_data_files"] = int(expired[0])
        result["snapshots_left"] = spark.sql(f"SELECT count(*) FROM {table}.snapshots").collect()[
            0
        ][0]
        location = next(
            str(r.data_type)
            for r in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
            if str(r.col_name).strip() == "Location"
        )
        result["location"] = location
        # The test now puts stray objects under the location (boto3), then says go on.
        print(json.dumps({"ready_for_orphans": location}), flush=True)
        json.loads(sys.stdin.readline())
        # The procedure refuses a cutoff younger than 24 hours; the test's stray objects
        # were dated three days back.
        cutoff = datetime.now(UTC) - timedelta(hours=25)
        with phase("remove_orphan_files_hadoop_listing"):
            try:
                spark.sql(
                    f"CALL {catalog}.system.remove_orphan_files(table => '{ns}.events', "
                    f"older_than => TIMESTAMP '{_ts(cutoff)}', dry_run => true)"
                ).collect()
                result["hadoop_listing"] = "ok"
            except Exception as exc:  # the expected failure without hadoop-aws
                lines = [line for line in str(exc).splitlines() if "Exception" in line]
                result["hadoop_listing"] = (lines or [str(exc)])[0][:300]
        with phase("remove_orphan_files"):
            removed = spark.sql(
                f"CALL {catalog}.system.remove_orphan_files(table => '{ns}.events', "
                f"older_than => TIMESTAMP '{_ts(cutoff)}', prefix_listing => true)"
            ).collect()
            result["orphans_removed"] = sorted(str(r[0]) for r in removed)
        with phase("read"):
            row = spark.sql(f"SELECT count(*), sum(id) FROM {table}").collect()[0]
            result["rows"], result["sum_id"] = int(row[0]), int(row[1])
            result["updated_names"] = spark.sql(
                f"SELECT count(*) FROM {table} WHERE name LIKE 'm%'"
            ).collect()[0][0]
    finally:
        spark.stop()
    print(json.dumps(result), flush=True)
    return 0


def _ts(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S")


if __name__ == "__main__":
    sys.exit(main())
