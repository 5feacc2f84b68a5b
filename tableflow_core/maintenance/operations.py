"""One function per maintenance operation, each one Iceberg Spark procedure call.

Dispatched by `OPERATIONS[name]` (a caller may put its own function under a name:
`tableflow maintain` runs `apply_deletes` on the driver). Each returns the procedure's output row as a dict
(files rewritten, bytes, snapshots expired...).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from tableflow_core.catalog.locations import LocationPolicy
from tableflow_core.catalog.placement import table_policy
from tableflow_core.config.models.base import parse_duration_seconds
from tableflow_core.config.models.catalogs import is_object_store_uri
from tableflow_core.config.models.maintenance import (
    CompactSettings,
    ExpireSnapshotsSettings,
    MaintenanceOperation,
    RemoveOrphansSettings,
    RewriteDeletesSettings,
)
from tableflow_core.errors import TableflowError
from tableflow_core.maintenance import expired_files
from tableflow_core.maintenance.delete_load import APPLY_DELETES, DeletesCompaction
from tableflow_core.maintenance.offsets import preserve_offsets
from tableflow_core.maintenance.schedule import ExpiryRun
from tableflow_core.maintenance.target import SparkTable
from tableflow_core.maintenance.tiers import compaction_threshold
from tableflow_core.sql_text import sql_string
from tableflow_core.state.table_state import read_table_state

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The only directories orphan removal scans. A Delta log written over the same files
# (`<table>/_delta_log/`) is beside them, never inside, so it is never listed, let
# alone deleted; Iceberg's hidden-path filter (names starting with `_` or `.`) is a
# second guard.
DATA_PATH_PROPERTY = "write.data.path"
METADATA_PATH_PROPERTY = "write.metadata.path"
PROTECTED_DIRECTORY = "_delta_log"


log = logging.getLogger(__name__)


class MaintenanceError(TableflowError, RuntimeError):
    """A maintenance operation failed or would have broken the table's state."""


Operation = Callable[["SparkSession", SparkTable, Any, datetime], dict[str, Any]]
# Each partition's data file sizes (`tiers.compaction_threshold`).
FileSizes = Callable[[], Iterable[Iterable[int]]]


def _call(spark: SparkSession, table: SparkTable, procedure: str, *args: str) -> dict[str, Any]:
    arguments = ", ".join((f"table => '{table.procedure_arg}'", *args))
    rows = spark.sql(f"CALL {table.procedure(procedure)}({arguments})").collect()
    if len(rows) == 1:
        return {k: v for k, v in rows[0].asDict().items() if not isinstance(v, list | dict)}
    return {"rows": len(rows)}


def _options(**values: object) -> str:
    pairs = ", ".join(f"'{k.replace('_', '-')}', '{v}'" for k, v in values.items())
    return f"options => map({pairs})"


def timestamp_literal(moment: datetime) -> str:
    """A Spark TIMESTAMP literal for an instant, independent of the session time zone."""
    utc = moment.astimezone(UTC).replace(tzinfo=None)
    return f"TIMESTAMP '{utc.isoformat(sep=' ', timespec='milliseconds')}Z'"


def compact(
    spark: SparkSession,
    table: SparkTable,
    settings: CompactSettings | DeletesCompaction,
    now: datetime,
) -> dict[str, Any]:
    """Compact by size tiers (`tiers.py`), the data files' sizes read with Spark's
    `data_files` metadata table (`tiered_compaction`: read by the caller)."""
    return _compact(spark, table, settings, lambda: spark_file_sizes(spark, table))


def tiered_compaction(read_sizes: FileSizes) -> Operation:
    """`compact` with each partition's data file sizes read by `read_sizes` (`tableflow
    maintain`: pyiceberg on the driver, no Spark job)."""

    def run(
        spark: SparkSession,
        table: SparkTable,
        settings: CompactSettings | DeletesCompaction,
        now: datetime,
    ) -> dict[str, Any]:
        return _compact(spark, table, settings, read_sizes)

    return run


def _compact(
    spark: SparkSession,
    table: SparkTable,
    settings: CompactSettings | DeletesCompaction,
    read_sizes: FileSizes,
) -> dict[str, Any]:
    """Bin-pack the small files of the tiers due; the replace snapshot carries no offsets
    (readers walk past). Due by delete files (`DeletesCompaction`, an upsert table):
    every data file with a delete file is rewritten too, whatever its size, and every
    small file (Iceberg's selection: no tiers, the rewrite is for the deletes).

    Rewritten files have their position deletes applied; on format v2+ tables the delete
    files left pointing at no live data file are dropped in the same commit. That needs
    the new files to get the rewrite's own sequence number (not the starting snapshot's,
    Iceberg's default, which only matters for equality deletes: tableflow writes none),
    or the last batch's delete files would still count as applicable.
    """
    values: dict[str, object] = {}
    threshold = None  # the tiers' `min-file-size-bytes`; Iceberg's own for deletes
    if isinstance(settings, DeletesCompaction):
        values["delete_file_threshold"] = settings.delete_file_threshold
        settings = settings.settings
    else:
        threshold = compaction_threshold(read_sizes(), settings.small_file_bytes)
        values["min_file_size_bytes"] = threshold
    values["min_input_files"] = settings.min_input_files
    values["target_file_size_bytes"] = settings.target_file_size_bytes
    if format_version(spark, table) >= 2:
        values["remove_dangling_deletes"] = "true"
        values["use_starting_sequence_number"] = "false"
    result = _call(spark, table, "rewrite_data_files", _options(**values))
    if threshold is not None:
        result["files_under_bytes"] = threshold
    return result


def spark_file_sizes(spark: SparkSession, table: SparkTable) -> list[list[int]]:
    """Each partition's data file sizes, from Spark's `data_files` metadata table (an
    unpartitioned table's has no `partition` column)."""
    files = spark.sql(f"SELECT * FROM {table.sql}.data_files")
    partition = "to_json(partition)" if "partition" in files.columns else "''"
    sizes: dict[tuple[int, str], list[int]] = {}
    for row in files.selectExpr("spec_id", f"{partition} AS p", "file_size_in_bytes").collect():
        sizes.setdefault((row.spec_id, row.p), []).append(int(row.file_size_in_bytes))
    return list(sizes.values())


def format_version(spark: SparkSession, table: SparkTable) -> int:
    rows = spark.sql(f"SHOW TBLPROPERTIES {table.sql} ('format-version')").collect()
    value = str(rows[0].value) if rows else "2"
    return int(value) if value.isdigit() else 2


def rewrite_deletes(
    spark: SparkSession, table: SparkTable, settings: RewriteDeletesSettings, now: datetime
) -> dict[str, Any]:
    """Compact position delete files and drop the dangling ones (upsert tables)."""
    return _call(
        spark,
        table,
        "rewrite_position_delete_files",
        _options(min_input_files=settings.min_delete_files),
    )


def rewrite_manifests(
    spark: SparkSession, table: SparkTable, settings: MaintenanceOperation, now: datetime
) -> dict[str, Any]:
    return _call(spark, table, "rewrite_manifests")


def expire_snapshots(
    spark: SparkSession,
    table: SparkTable,
    settings: ExpiryRun | ExpireSnapshotsSettings,
    now: datetime,
) -> dict[str, Any]:
    """Expire old snapshots; the committed offsets are copied to the table property first.

    `settings`: the cutoff the schedule computed from the table's history rule
    (`history.py`: by age and count), or bare settings (by `older_than` from `now`).

    Through Iceberg's table API on the driver's JVM, not the `expire_snapshots` procedure:
    the procedure finds the files to delete with a Spark job that lists every file of
    every snapshot before and after (7-8 s a run for a table keeping ~550 snapshots in
    the accelerated soak, 32-39 s on a loaded machine), where the table API walks only
    what the expired snapshots changed (1.2-1.4 s for the same 100 snapshots of 715, the
    same files deleted; `docs/maintenance.md`). The files it frees are kept for
    `keep_files_for` and deleted by a later run (`expired_files.py`).
    """
    preserve_offsets(spark, table)
    if isinstance(settings, ExpiryRun):
        cutoff = settings.cutoff(now)
    else:
        cutoff = now - timedelta(seconds=parse_duration_seconds(settings.older_than or "7d"))
    keep_files_s = settings.keep_files_s
    iceberg = iceberg_table(spark, table)
    before = snapshot_count(spark, iceberg)
    expiry = (
        iceberg.expireSnapshots()
        .expireOlderThan(int(cutoff.timestamp() * 1000))
        .retainLast(int(settings.retain_last))
    )
    freed = None
    if keep_files_s > 0:
        # Collects the paths Iceberg would delete (its deletes run on the calling thread).
        freed = spark._jvm.java.util.stream.Stream.builder()  # type: ignore[union-attr]
        expiry = expiry.deleteWith(freed)
    expiry.commit()
    kept = snapshot_count(spark, iceberg)
    paths: list[str] = []
    if freed is not None:
        joined = freed.build().collect(spark._jvm.java.util.stream.Collectors.joining("\n"))  # type: ignore[union-attr]
        paths = expired_files.list_paths(str(joined))
    return {
        "expired_snapshots": before - kept,
        "snapshots_kept": kept,
        **_keep_expired_files(spark, iceberg, paths, keep_files_s, now),
    }


def _keep_expired_files(
    spark: SparkSession, iceberg: Any, paths: list[str], keep_files_s: float, now: datetime
) -> dict[str, int]:
    """The files this expiry freed listed for later; those of the lists due now deleted
    (`expired_files.py`). One property commit when anything changed."""
    iceberg.refresh()
    properties = {str(k): str(v) for k, v in dict(iceberg.properties()).items()}
    policy = table_policy(str(iceberg.location()), properties)
    now_ms = int(now.timestamp() * 1000)
    due, kept = expired_files.split_due(
        expired_files.parse_pending(properties.get(expired_files.PROPERTY)), now_ms
    )
    io = iceberg.io()
    deleted = outside = 0
    for pending in due:
        listed = _read_list(spark, io, pending.location, policy)
        if listed is None:
            continue
        inside, left = expired_files.confined(listed, policy)
        for path in inside:
            io.deleteFile(path)
        io.deleteFile(pending.location)
        deleted, outside = deleted + len(inside), outside + len(left)
    added: tuple[expired_files.PendingList, ...] = ()
    if paths:
        name = f"{expired_files.LIST_PREFIX}{now_ms}-{uuid.uuid4().hex}.txt"
        location = str(iceberg.operations().metadataFileLocation(name))
        stream = io.newOutputFile(location).createOrOverwrite()
        try:
            stream.write(bytearray(expired_files.list_text(paths), "utf-8"))
        finally:
            stream.close()
        added = (expired_files.PendingList(location, now_ms + int(keep_files_s * 1000)),)
    if due or added:
        remaining = (*kept, *added)
        update = iceberg.updateProperties()
        if remaining:
            update.set(expired_files.PROPERTY, expired_files.render_pending(remaining))
        else:
            update.remove(expired_files.PROPERTY)
        update.commit()
    if outside:
        log.warning(
            "%s: %d listed expired files outside the table's folders were left", iceberg, outside
        )
    return {
        "expired_files_kept": len(paths),
        "expired_files_deleted": deleted,
        **({"expired_files_outside_table": outside} if outside else {}),
    }


def _read_list(
    spark: SparkSession, io: Any, location: str, policy: LocationPolicy
) -> list[str] | None:
    """The paths of a list of expired files; None when it is gone or not the table's."""
    from py4j.protocol import Py4JJavaError  # here: `plan` imports this module, never py4j

    if not policy.allows(location):
        return None
    streams = spark._jvm.org.apache.iceberg.relocated.com.google.common.io.ByteStreams  # type: ignore[union-attr]
    stream = None
    try:
        stream = io.newInputFile(location).newStream()
        text = bytes(streams.toByteArray(stream)).decode("utf-8")
    except Py4JJavaError:  # gone (e.g. removed as an orphan): its files are orphans too
        return None
    finally:
        if stream is not None:
            stream.close()
    return expired_files.list_paths(text)


def iceberg_table(spark: SparkSession, table: SparkTable) -> Any:
    """The Iceberg `Table` (Java) Spark's catalog loads for `table`."""
    spark3 = spark._jvm.org.apache.iceberg.spark.Spark3Util  # type: ignore[union-attr]
    return spark3.loadIcebergTable(spark._jsparkSession, table.sql)


def snapshot_count(spark: SparkSession, iceberg: Any) -> int:
    guava = spark._jvm.org.apache.iceberg.relocated.com.google.common  # type: ignore[union-attr]
    return int(guava.collect.Iterables.size(iceberg.snapshots()))


def table_location(spark: SparkSession, table: SparkTable) -> str:
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {table.sql}").collect():
        if str(row.col_name).strip() == "Location":
            return str(row.data_type).rstrip("/")
    raise MaintenanceError(f"{table}: Spark does not report the table's location")


def orphan_scan_locations(location: str, properties: dict[str, str]) -> list[str]:
    """The directories orphan removal scans: the table's data and metadata folders."""
    scanned = [
        properties.get(DATA_PATH_PROPERTY, f"{location}/data"),
        properties.get(METADATA_PATH_PROPERTY, f"{location}/metadata"),
    ]
    for path in scanned:
        if PROTECTED_DIRECTORY in path.rstrip("/").split("/"):
            raise MaintenanceError(
                f"refusing to remove orphans under {path}: it is inside a {PROTECTED_DIRECTORY} directory"
            )
    return scanned


def remove_orphans(
    spark: SparkSession, table: SparkTable, settings: RemoveOrphansSettings, now: datetime
) -> dict[str, Any]:
    """Delete files no snapshot references, older than `older_than` (never below the floor
    the config enforces, so uncommitted files of runs in flight are safe)."""

    properties = read_table_state(spark, table.sql).properties
    cutoff = now - timedelta(seconds=parse_duration_seconds(settings.older_than))
    removed = 0
    for location in orphan_scan_locations(table_location(spark, table), properties):
        arguments = ", ".join(
            (
                f"table => '{table.procedure_arg}'",
                f"older_than => {timestamp_literal(cutoff)}",
                f"location => {sql_string(location)}",
                # Spark lists through Hadoop by default, which has no `s3://` file system
                # here: S3FileIO lists the prefix itself.
                *(["prefix_listing => true"] if is_object_store_uri(location) else []),
            )
        )
        try:
            rows = spark.sql(
                f"CALL {table.procedure('remove_orphan_files')}({arguments})"
            ).collect()
        except Exception as exc:
            if _missing_directory(exc):
                continue  # e.g. no data written yet
            raise
        removed += len(rows)
    return {"orphan_files_removed": removed}


def _missing_directory(exc: Exception) -> bool:
    text = str(exc)
    return "FileNotFoundException" in text or "does not exist" in text


OPERATIONS: dict[str, Operation] = {
    # Spark's way to apply an upsert table's deletes: `compact` with every data file with
    # a delete file rewritten. `tableflow maintain` replaces it by the driver's rewrite
    # (pipeline/apply_deletes.py, ~6x less CPU: docs/architecture.md).
    APPLY_DELETES: compact,
    "compact": compact,
    "rewrite_deletes": rewrite_deletes,
    "rewrite_manifests": rewrite_manifests,
    "expire_snapshots": expire_snapshots,
    "remove_orphans": remove_orphans,
}
