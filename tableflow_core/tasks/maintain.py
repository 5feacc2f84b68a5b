"""`tableflow maintain`: run the maintenance that is due on the selected tables.

What is due is read with pyiceberg (no JVM): `--dry-run` never starts Spark. Each
table is maintained under its lock (`runner/lock.py`, the one apply and run take),
so maintenance never races an ingest of the same table started from this project
on this host; what is due is read again once the lock is held. After a table's
maintenance commits, its new metadata pointer is published to the catalogs in its
`publish_to`, and the Delta log of a `formats: [.., delta]` table is synced (compaction
changes its files). An upsert table's deletes table (`ingest/upsert_order.py`) gets the
same operations right after its table. `tableflow run` calls this between refreshes of a
table. An upsert table without a block still gets the rewrite its delete files make due
(`maintenance/delete_load.py`): `apply_deletes`, run on the driver with pyiceberg and
pyarrow (`pipeline/apply_deletes.py`), under the lock like the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tableflow_core.config.models.dead_letter import IcebergDeadLetter
from tableflow_core.config.project import Project, Table
from tableflow_core.delta import storage_options_of, sync_delta_log
from tableflow_core.engine.spark_session import build_spark_session, register_catalog
from tableflow_core.ingest.upsert_order import deletes_table
from tableflow_core.maintenance import (
    DueOperation,
    MaintenanceReport,
    OperationResult,
    maintenance_due,
    run_maintenance,
)
from tableflow_core.maintenance.activity import TableActivity, data_file_sizes, table_activity
from tableflow_core.maintenance.beside_ingest import maintained_beside_ingest
from tableflow_core.maintenance.delete_load import (
    APPLY_DELETES,
    budget_of,
    delete_upkeep,
    readers_waiting,
)
from tableflow_core.maintenance.history import metadata_upkeep, table_history
from tableflow_core.maintenance.operations import OPERATIONS, Operation, tiered_compaction
from tableflow_core.maintenance.run import StateReader
from tableflow_core.maintenance.schedule import RUN_ORDER, not_due_reason
from tableflow_core.pipeline.apply_deletes import driver_operation
from tableflow_core.publish import PublishResult, publish_table
from tableflow_core.runner.lock import table_locks
from tableflow_core.state.table_state import TableState, table_state_of
from tableflow_core.targets.catalog import CatalogHandle, use_catalog
from tableflow_core.targets.storage import object_store_java_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOCK_COMMAND = "tableflow maintain"
# What a dead-letter table gets of its tables' maintenance: history and files, not
# orphan removal (its tables' runs write there too) nor delete rewrites (it has none).
DEAD_LETTER_OPERATIONS = frozenset({"compact", "rewrite_manifests", "expire_snapshots"})
# What an upsert table's deletes table gets: all but the operations on delete files (it
# is only ever appended to, so it has none).
DELETES_TABLE_OPERATIONS = frozenset(RUN_ORDER) - {APPLY_DELETES, "rewrite_deletes"}
NO_BLOCK = "no maintenance block"


def how_to_add_maintenance(project: Project, tables: tuple[Table, ...]) -> str:
    """What to add for tables without a `maintenance:` block, and where (printed once)."""
    where = ", ".join(t.source.relative_to(project.root) for t in tables[:3])
    more = f" and {len(tables) - 3} more" if len(tables) > 3 else ""
    config = (
        project.config_file.relative_to(project.root)
        if project.config_file.is_relative_to(project.root)
        else project.config_file
    )
    return (
        "Nothing is compacted or expired without a `maintenance:` block. Add one under "
        f"`defaults:` in {config} (every table) or under a table ({where}{more}), e.g.:\n"
        "  maintenance:\n"
        "    every: 1h\n"
        "    compact: {every_commits: 10, every_small_files: 20}\n"
        "    expire_snapshots: true   # keeps each table's last 500 refreshes (1s: 100)\n"
        "Every key: docs/reference.md (`maintenance`); how it runs: docs/maintenance.md."
    )


@dataclass(frozen=True)
class TableMaintenance:
    """What `maintain` found and did for one table."""

    table: str
    due: tuple[DueOperation, ...] = ()
    report: MaintenanceReport | None = None
    published: PublishResult | None = None
    note: str | None = None  # why nothing ran (table missing, nothing due)
    error: str | None = None
    delta: Any = None  # DeltaSyncResult after maintenance committed (delta tables)
    delta_error: str | None = None
    deletes: MaintenanceReport | None = None  # an upsert table's deletes table, maintained
    # Its Iceberg dead-letter table (a commit per run that dead-letters), maintained.
    dead_letters: MaintenanceReport | None = None
    # What the table keeps of its metadata and history (`maintenance/history.py`).
    keeps: str | None = None

    @property
    def ok(self) -> bool:
        return (
            self.error is None
            and self.delta_error is None
            and (self.report is None or self.report.ok)
            and (self.published is None or self.published.ok)
            and (self.deletes is None or self.deletes.ok)
            and (self.dead_letters is None or self.dead_letters.ok)
        )


def load_state(
    handle: CatalogHandle, table: Table
) -> tuple[dict[str, str] | None, TableActivity | None]:
    """The table's properties and activity (None, None: the table does not exist)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        loaded = handle.catalog.load_table((*table.namespace, table.table))
    except NoSuchTableError:
        return None, None
    return dict(loaded.properties), table_activity(loaded)


def maintenance_spark_session(project: Project, handle: CatalogHandle) -> SparkSession:
    """The target's Spark application, with the target's catalog registered."""

    settings = project.target.spark
    return build_spark_session(
        settings.master,
        settings.app_name,
        {k: str(v) for k, v in settings.conf.items()},
        list(settings.packages),
        {handle.spark_name: handle.spark_properties},
        share_classes=settings.class_data_sharing,
        iceberg=settings.iceberg_jars,
        java_options=object_store_java_options(project.target.catalog),
    )


@dataclass
class MaintainTask:
    project: Project
    tables: tuple[Table, ...]
    dry_run: bool = False
    force: bool = False
    only: frozenset[str] | None = None
    lock_timeout_s: float = 0.0
    # `tableflow run`: tables whose ingest survives a maintenance commit are maintained
    # without their lock (maintenance/beside_ingest.py).
    beside_ingest: bool = False
    spark: SparkSession | None = None  # reuse a session (tests); else one is built if needed
    handle: CatalogHandle | None = None  # an open catalog to use; else one is opened
    console: Console = field(default_factory=lambda: Console(stderr=True))
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    on_table: Callable[[TableMaintenance], None] | None = None

    def due(
        self, handle: CatalogHandle, table: Table
    ) -> tuple[dict[str, str] | None, list[DueOperation], TableActivity | None]:
        properties, activity = load_state(handle, table)
        due = maintenance_due(
            table, properties, self.now(), force=self.force, only=self.only, activity=activity
        )
        return properties, due, activity

    def run(self) -> list[TableMaintenance]:
        results: list[TableMaintenance] = []
        with use_catalog(self.project, self.handle) as handle:
            for table in self.tables:
                result = self._one(handle, table)
                results.append(result)
                if self.on_table is not None:
                    self.on_table(result)
        return results

    def _one(self, handle: CatalogHandle, table: Table) -> TableMaintenance:
        # An upsert table without a block still gets its deletes applied.
        if table.maintenance is None and table.mode != "upsert" and not self.force:
            where = table.source.relative_to(self.project.root)
            return TableMaintenance(table.name, note=f"{NO_BLOCK} ({where})")
        properties, due, activity = self.due(handle, table)
        if properties is None:
            return TableMaintenance(table.name, note="table does not exist yet")
        if not due or self.dry_run:
            return TableMaintenance(
                table.name,
                tuple(due),
                note=None if due else _nothing_due(table, activity),
                keeps=keeps(table, properties),
            )
        try:
            with self._lock(table):
                _, due, activity = self.due(handle, table)  # another host may have done it
                if not due:
                    return TableMaintenance(table.name, note=_nothing_due(table, activity))
                spark = self._spark(handle)
                report = self._run(spark, due, handle, (*table.namespace, table.table))
                deletes = self._maintain_deletes(handle, table, spark, due)
                dead_letters = self._maintain_dead_letters(handle, table, spark, due)
                published = None
                if table.publish_to and report.metadata_location:
                    loaded = handle.catalog.load_table((*table.namespace, table.table))
                    published = publish_table(
                        self.project,
                        table,
                        report.metadata_location,
                        file_io=dict(loaded.io.properties),
                    )
                delta, delta_error = None, None
                if "delta" in table.formats and report.metadata_location:
                    delta, delta_error = self._sync_delta(handle, table)
                return TableMaintenance(
                    table.name,
                    tuple(due),
                    report,
                    published,
                    delta=delta,
                    delta_error=delta_error,
                    deletes=deletes,
                    dead_letters=dead_letters,
                )
        except Exception as exc:
            return TableMaintenance(
                table.name, tuple(due), error=self.project.redact(f"{type(exc).__name__}: {exc}")
            )

    def _lock(self, table: Table) -> AbstractContextManager[object]:
        """The table's lock, or none for a table `run` maintains beside its ingest."""
        if self.beside_ingest and maintained_beside_ingest(table):
            return nullcontext()
        return table_locks(
            self.project.root / "target" / "locks",
            [table.name],
            self.lock_timeout_s,
            command=LOCK_COMMAND,
            base=self.project.root,
        )

    def _maintain_deletes(
        self,
        handle: CatalogHandle,
        table: Table,
        spark: Any,
        due: list[DueOperation],
    ) -> MaintenanceReport | None:
        """The same operations on an upsert table's deletes table, when it has one (it
        gets a commit per run that deletes keys). A failure is reported, not raised."""
        if table.mode != "upsert":
            return None
        parts = (*table.namespace, deletes_table(table.table))
        return self._maintain_companion(spark, due, DELETES_TABLE_OPERATIONS, handle, parts)

    def _maintain_dead_letters(
        self, handle: CatalogHandle, table: Table, spark: Any, due: list[DueOperation]
    ) -> MaintenanceReport | None:
        """The table's operations on its Iceberg dead-letter table, when it has one: it
        gets a commit per run that dead-letters (a shared one, from each of its tables)
        and no maintenance block of its own. A failure is reported, not raised."""
        if not isinstance(table.dlq, IcebergDeadLetter):
            return None
        parts = tuple(table.dlq.table.split("."))
        return self._maintain_companion(spark, due, DEAD_LETTER_OPERATIONS, handle, parts)

    def _maintain_companion(
        self,
        spark: Any,
        due: list[DueOperation],
        allowed: frozenset[str],
        handle: CatalogHandle,
        parts: tuple[str, ...],
    ) -> MaintenanceReport | None:
        """Run the `allowed` operations of `due` on a table that goes with the project's
        table (its deletes table, its dead-letter table), when it exists and any is due (else
        None); a failure is the report's one operation, not raised."""
        if not handle.catalog.table_exists(parts):
            return None
        wanted = _companion_operations(due, allowed)
        if not wanted:
            return None
        began = time.monotonic()
        try:
            return self._run(spark, wanted, handle, parts)
        except Exception as exc:
            error = self.project.redact(f"{type(exc).__name__}: {exc}")
            failed = OperationResult(
                "maintenance", "error", round(time.monotonic() - began, 3), error=error
            )
            return MaintenanceReport(_spark_name(handle, parts), (failed,), None, None)

    def _run(
        self, spark: Any, due: list[DueOperation], handle: CatalogHandle, parts: tuple[str, ...]
    ) -> MaintenanceReport:
        """`due` on the catalog's table `parts` through Spark, reading on the driver with
        pyiceberg what Spark would read with jobs of its own (`_driver_reads`)."""
        return run_maintenance(
            spark,
            _spark_name(handle, parts),
            due,
            now=self.now,
            redact=self.project.redact,
            read_state=_state_reader(handle, parts),
            functions=_driver_reads(handle, parts),
        )

    def _sync_delta(self, handle: CatalogHandle, table: Table) -> tuple[Any, str | None]:
        """The Delta log mirrors the maintained snapshot; an error is reported, not raised
        (the maintenance commits stand)."""

        try:
            loaded = handle.catalog.load_table((*table.namespace, table.table))
            return sync_delta_log(loaded, storage_options=storage_options_of(loaded)), None
        except Exception as exc:
            return None, self.project.redact(f"delta log: {type(exc).__name__}: {exc}")[:500]

    def _spark(self, handle: CatalogHandle) -> Any:

        if self.spark is None:
            self.spark = maintenance_spark_session(self.project, handle)
        else:
            register_catalog(self.spark, handle.spark_name, handle.spark_properties)
        return self.spark


def _companion_operations(due: list[DueOperation], allowed: frozenset[str]) -> list[DueOperation]:
    """The table's due operations that a companion table (its deletes or dead-letter
    table, append-only) runs: those in `allowed`, a compaction due for the table's delete
    files made a plain one (the companion has none)."""
    return [replace(d, for_deletes=False) for d in due if d.operation in allowed]


def _state_reader(handle: CatalogHandle, parts: tuple[str, ...]) -> StateReader:
    """The table's state and metadata file as the catalog has them (pyiceberg: no Spark
    job, where Spark's metadata tables cost seven jobs a maintenance)."""

    def read() -> tuple[TableState, str | None]:
        loaded = handle.catalog.load_table(parts)
        return table_state_of(loaded.metadata), loaded.metadata_location

    return read


def _spark_name(handle: CatalogHandle, parts: tuple[str, ...]) -> str:
    return ".".join((handle.spark_name, *parts))


def _driver_reads(handle: CatalogHandle, parts: tuple[str, ...]) -> dict[str, Operation]:
    """The operations, compaction choosing its tiers from the data file sizes pyiceberg
    reads on the driver (Spark's `data_files` table would be one more Spark job), and an
    upsert table's deletes applied by the driver (`pipeline/apply_deletes.py`)."""

    def sizes() -> list[list[int]]:
        return data_file_sizes(handle.catalog.load_table(parts))

    return {
        **OPERATIONS,
        "compact": tiered_compaction(sizes),
        APPLY_DELETES: driver_operation(handle.catalog, parts),
    }


def keeps(table: Table, properties: dict[str, str]) -> str:
    """`100 metadata files, manifests merged from 10, snapshots 8m20s; history keeps ...`:
    the table's own properties, and the history its expiry keeps."""
    kept = metadata_upkeep(properties)
    if table.mode == "upsert":
        kept = f"{kept}, {delete_upkeep(budget_of(table.maintenance))}"
    block = table.maintenance
    if block is not None and block.expire_snapshots is not None:
        return f"{kept}; history {table_history(table).describe()}"
    return f"{kept}; every snapshot (no expire_snapshots)"


def _nothing_due(table: Table, activity: TableActivity | None) -> str:
    reasons = [not_due_reason(table, activity)]
    if table.mode == "upsert":
        reasons.append(readers_waiting(activity, budget_of(table.maintenance)))
    said = "; ".join(r for r in reasons if r)
    return f"nothing due ({said})" if said else "nothing due"
