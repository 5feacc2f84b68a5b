"""`tableflow apply`: run a plan's DAG on one Spark application, exactly as planned."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tableflow_core.config.project import Project, Table
from tableflow_core.plan.actions import (
    ChangePartitionSpec,
    ChangeSortOrder,
    CreateTable,
    DropTable,
    EvolveSchema,
    Ingest,
    ReplaceTable,
    UpdateProperties,
)
from tableflow_core.plan.builder import _fingerprint
from tableflow_core.plan.desired import config_hash, format_spec, start_from_value
from tableflow_core.plan.plan import DagTask, Plan
from tableflow_core.plan.plan_file import StalePlanError, stale_reasons
from tableflow_core.plan.world import read_world
from tableflow_core.runner.executor import TaskOutcome, execute_dag
from tableflow_core.runner.lock import table_locks
from tableflow_core.runner.progress import ApplyProgress
from tableflow_core.runner.results import RunResults, TableResult, write_run_results
from tableflow_core.targets.catalog import CatalogHandle, open_catalog
from tableflow_core.targets.kafka import kafka_consumer_config
from tableflow_core.targets.registry import registry_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class PlanNotApplicableError(RuntimeError):
    """The plan has blockers (not supported yet, destructive without the flag, ...)."""


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass
class ApplyTask:
    project: Project
    plan: Plan
    spark: SparkSession | None = None  # reuse a session (tests, notebooks); else one is built
    console: Console = field(default_factory=lambda: Console(stderr=True))
    lock_timeout_s: float = 0.0
    max_parallel: int = 4
    results_path: Path | None = None
    # Optional decoder factory passed to the engine (tests of failure paths).
    decoder_factory: Callable[[Any], Any] | None = None

    def run(self) -> RunResults:
        plan = self.plan
        if plan.blockers:
            listed = "\n".join(f"  - {b.message} ({b.location or b.table})" for b in plan.blockers)
            raise PlanNotApplicableError(f"the plan cannot be applied:\n{listed}")
        tables = tuple(self.project.table(name) for name in plan.tables)
        started_at, began = datetime.now(UTC), time.monotonic()
        lock_dir = self.project.root / "target" / "locks"
        with (
            table_locks(lock_dir, plan.tables, self.lock_timeout_s),
            open_catalog(self.project) as handle,
        ):
            world = read_world(
                self.project, tables, handle, list_undeclared=False, read_kafka=False
            )
            current = [
                _fingerprint(t, world.tables.get(t.identifier), world.schemas.get(t.name))
                for t in tables
            ]
            reasons = stale_reasons(plan, current, config_hash(self.project, tables))
            if reasons:
                raise StalePlanError(reasons)
            outcomes: dict[str, TaskOutcome] = {}
            if plan.dag.tasks:
                spark = self._spark(handle)
                runner = _TaskRunner(
                    self.project, plan, spark, handle, _write_schemas(plan, tables, world),
                    self.decoder_factory,
                )  # fmt: skip
                with ApplyProgress(self.console, len(plan.dag.tasks)) as progress:
                    outcomes = execute_dag(
                        plan.dag,
                        runner.run,
                        max_workers=self.max_parallel,
                        on_event=progress.on_event,
                        describe_error=lambda exc: _describe(self.project, exc),
                    )
        results = _results(
            self.project, plan, tables, outcomes, started_at, time.monotonic() - began
        )
        write_run_results(
            results, self.results_path or self.project.root / "target" / "run_results.json"
        )
        return results

    def _spark(self, handle: CatalogHandle) -> SparkSession:
        from tableflow_core.engine.spark_session import register_catalog

        if self.spark is None:
            return project_spark_session(self.project, {handle.spark_name: handle.spark_properties})
        register_catalog(self.spark, handle.spark_name, handle.spark_properties)
        return self.spark


def project_spark_session(
    project: Project, catalogs: dict[str, dict[str, str]] | None = None
) -> SparkSession:
    """The Spark application the target's `spark` settings describe (FAIR scheduling:
    each table's jobs run in their own pool)."""
    from tableflow_core.engine.spark_session import build_spark_session

    settings = project.target.spark
    conf = {"spark.scheduler.mode": "FAIR", **{k: str(v) for k, v in settings.conf.items()}}
    return build_spark_session(
        settings.master, settings.app_name, conf, list(settings.packages), catalogs
    )


@dataclass
class _TaskRunner:
    """Performs one DAG task with Spark."""

    project: Project
    plan: Plan
    spark: Any
    handle: CatalogHandle
    schemas: Any
    decoder_factory: Callable[[Any], Any] | None

    def run(self, task: DagTask) -> Any:
        sc = self.spark.sparkContext
        # Each table's jobs get their own group and FAIR pool (no-op under FIFO mode).
        sc.setJobGroup(f"tableflow:{task.id}", f"tableflow {task.id}", interruptOnCancel=True)
        sc.setLocalProperty("spark.scheduler.pool", task.table or "tableflow")
        if task.kind == "create_namespace":
            namespace = self.plan.action(task.actions[0]).identifier
            self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self._ident(namespace)}")
            return None
        if task.kind == "drop_table":
            action = self.plan.action(task.actions[0])
            assert isinstance(action, DropTable)
            self.spark.sql(f"DROP TABLE IF EXISTS {self._ident(action.identifier)} PURGE")
            return None
        if task.kind == "publish":
            raise NotImplementedError("publish_to is not supported yet")
        assert task.table is not None
        table = self.project.table(task.table)
        spec = self.ingest_spec(table)
        if task.kind == "ddl":
            return [self._ddl(spec, self.plan.action(a)) for a in task.actions]
        action = self.plan.action(task.actions[0])
        assert isinstance(action, Ingest)
        return self._ingest(spec, action)

    def _ident(self, dotted: str) -> str:
        return ".".join(quote(p) for p in (self.handle.spark_name, *dotted.split(".")))

    def ingest_spec(self, table: Table) -> Any:
        from tableflow_core.ingest.spec import IngestSpec, PartitionFieldSpec, SortFieldSpec
        from tableflow_core.plan.desired import managed_properties
        from tableflow_core.schemas.decoding import DecoderSpec, serialize_schema

        resolved = self.schemas[table.name]
        decoder = DecoderSpec(
            topic=table.topic,
            value=format_spec(table.value),
            key=format_spec(table.key),
            metadata_columns=table.metadata_columns,
            registry=registry_settings(self.project.target.schema_registry),
            target_schema_ipc=serialize_schema(resolved.arrow_schema),
        )
        return IngestSpec(
            table_name=table.name,
            catalog=self.handle.spark_name,
            namespace=table.namespace,
            table=table.table,
            topic=table.topic,
            decoder=decoder,
            partition_by=tuple(
                PartitionFieldSpec(p.column, p.transform, p.param) for p in table.partition_by
            ),
            sort_by=tuple(
                SortFieldSpec(
                    s.column,
                    s.direction == "desc",
                    (s.nulls or ("first" if s.direction == "asc" else "last")) == "first",
                )
                for s in table.sort_by
            ),
            properties=tuple(sorted(managed_properties(table).items())),
            start_from=start_from_value(table),
            max_records_per_run=table.max_records_per_run,
        )

    def _ddl(self, spec: Any, action: Any) -> str:
        from tableflow_core.engine import ddl

        resolved = self.schemas[spec.table_name]
        if isinstance(action, CreateTable):
            ddl.create_table(self.spark, spec, resolved)
        elif isinstance(action, ReplaceTable):
            self.spark.sql(f"DROP TABLE IF EXISTS {spec.identifier} PURGE")
            ddl.create_table(self.spark, spec, resolved)
        elif isinstance(action, EvolveSchema):
            from tableflow_core.schemas.evolution import SchemaChange, SchemaDiff

            diff = SchemaDiff(
                tuple(SchemaChange(c.kind, c.path, c.detail) for c in action.changes), ()
            )
            ddl.apply_schema_changes(self.spark, spec, diff)
        elif isinstance(action, UpdateProperties):
            pairs = ", ".join(f"'{k}' = '{v}'" for k, v in action.set.items())
            self.spark.sql(f"ALTER TABLE {spec.identifier} SET TBLPROPERTIES ({pairs})")
        elif isinstance(action, ChangePartitionSpec):
            from tableflow_core.ingest.spec import PartitionFieldSpec

            def field_sql(term: Any) -> str:
                return ddl.partition_sql(
                    PartitionFieldSpec(term.column, term.transform, term.param)
                )

            for term in action.current:
                if term not in action.desired:
                    self.spark.sql(
                        f"ALTER TABLE {spec.identifier} DROP PARTITION FIELD {field_sql(term)}"
                    )
            for term in action.desired:
                if term not in action.current:
                    self.spark.sql(
                        f"ALTER TABLE {spec.identifier} ADD PARTITION FIELD {field_sql(term)}"
                    )
        elif isinstance(action, ChangeSortOrder):
            if action.desired:
                order = ", ".join(ddl.sort_sql(s) for s in spec.sort_by)
                self.spark.sql(f"ALTER TABLE {spec.identifier} WRITE ORDERED BY {order}")
            else:
                self.spark.sql(f"ALTER TABLE {spec.identifier} WRITE UNORDERED")
        else:
            raise ValueError(f"unknown DDL action {action.kind}")
        return str(action.id)

    def _ingest(self, spec: Any, action: Ingest) -> Any:
        from tableflow_core.engine.ingest import ingest
        from tableflow_core.kafka.offsets import OffsetRange

        replaced = any(a.kind == "replace_table" for a in self.plan.actions_for(spec.table_name))
        seen = self.plan.fingerprint(spec.table_name)
        expected = {} if replaced or seen is None else dict(seen.committed_offsets or {})
        ranges = [OffsetRange(action.topic, r.partition, r.start, r.end) for r in action.ranges]
        kwargs: dict[str, Any] = {
            "start_offsets": {p.partition: p.start for p in action.partitions},
            "warnings": list(action.warnings),
        }
        if self.decoder_factory is not None:
            kwargs["decoder_factory"] = self.decoder_factory
        return ingest(
            self.spark,
            spec,
            ranges,
            kafka_consumer_config(self.project.target.kafka),
            expected,
            **kwargs,
        )


def _write_schemas(plan: Plan, tables: tuple[Table, ...], world: Any) -> dict[str, Any]:
    """Resolved schemas widened to the tables' write schemas (columns a writer dropped stay)."""
    from tableflow_core.schemas.write_schema import write_resolved_schemas

    replaced = {a.table for a in plan.actions if a.kind == "replace_table"}
    current = {
        t.name: world.tables[t.identifier].schema
        for t in tables
        if t.identifier in world.tables and t.name not in replaced
    }
    return write_resolved_schemas(world.schemas, current)


def _describe(project: Project, exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    text = " ".join(lines[:3]) if lines else type(exc).__name__
    return project.redact(f"{type(exc).__name__}: {text}"[:600])


def _results(
    project: Project,
    plan: Plan,
    tables: tuple[Table, ...],
    outcomes: dict[str, TaskOutcome],
    started_at: datetime,
    duration_s: float,
) -> RunResults:
    table_results = []
    for table in tables:
        tasks = [t for t in plan.dag.tasks if t.table == table.name]
        mine = [outcomes[t.id] for t in tasks if t.id in outcomes]
        errors = [o.error for o in mine if o.status == "error" and o.error]
        if not tasks:
            status = "no_changes"
        elif errors:
            status = "error"
        elif any(o.status == "skipped" for o in mine) or len(mine) < len(tasks):
            status = "skipped"
        else:
            status = "success"
        ddl = tuple(a for t in tasks if t.kind == "ddl" for a in t.actions)
        ingest = next(
            (o.value for o in mine if o.task_id == f"ingest:{table.name}" and o.value), None
        )
        values: dict[str, Any] = {}
        if ingest is not None:
            values = {
                "records_read": ingest.records_read,
                "records_written": ingest.records_written,
                "records_skipped": 0,
                "offsets_before": dict(ingest.offsets_before),
                "offsets_after": dict(ingest.offsets_after),
                "snapshot_id": ingest.snapshot_id,
            }
        table_results.append(
            TableResult(
                table=table.name,
                identifier=table.identifier,
                status=status,
                ddl=ddl,
                duration_s=round(sum(o.duration_s for o in mine), 3),
                error="; ".join(errors) or None,
                **values,
            )
        )
    other_errors = tuple(
        f"{o.task_id}: {o.error}" for o in outcomes.values() if o.status == "error" and o.error
    )
    failed = any(t.status in ("error", "skipped") for t in table_results) or bool(other_errors)
    return RunResults(
        project=project.name,
        target=project.target_name,
        started_at=started_at.isoformat(),
        finished_at=datetime.now(UTC).isoformat(),
        duration_s=round(duration_s, 3),
        status="error" if failed else "success",
        plan_summary=plan.summary_line(),
        tables=tuple(table_results),
        errors=other_errors,
    )
