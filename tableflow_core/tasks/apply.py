"""`tableflow apply`: run a plan's DAG on one Spark application, exactly as planned."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tableflow_core.collector import freeze_startup_heap
from tableflow_core.config.project import Project, Table
from tableflow_core.engine.spark_session import (
    SessionStarter,
    SparkOnDemand,
    build_spark_session,
)
from tableflow_core.errors import TableflowError
from tableflow_core.pipeline.shared_run import DRIVER_READ_MAX_RECORDS
from tableflow_core.plan.actions import Ingest
from tableflow_core.plan.builder import table_fingerprint
from tableflow_core.plan.desired import config_hash
from tableflow_core.plan.plan import Plan
from tableflow_core.plan.plan_file import StalePlanError, stale_reasons
from tableflow_core.plan.world import read_world
from tableflow_core.plan.world_state import WorldState
from tableflow_core.runner.actions import ApplyContext, run_task
from tableflow_core.runner.executor import TaskOutcome, execute_dag
from tableflow_core.runner.lock import table_locks
from tableflow_core.runner.progress import ApplyProgress
from tableflow_core.runner.results import (
    RunResults,
    TableResult,
    merge_run_results,
    write_run_results,
)
from tableflow_core.targets.catalog import CatalogHandle, use_catalog
from tableflow_core.targets.storage import object_store_java_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class PlanNotApplicableError(TableflowError, RuntimeError):
    """The plan has blockers (not supported yet, destructive without the flag, ...)."""

    changes_nothing = True


@dataclass
class ApplyTask:
    project: Project
    plan: Plan
    spark: SparkSession | None = None  # reuse a session (tests, notebooks); else one is built
    # The CLI's session, started while planning when the plan needs Spark (`needs_spark`),
    # else at a task's first need of it; catalogs are added.
    spark_starter: SessionStarter | None = None
    handle: CatalogHandle | None = None  # an open catalog to use; else one is opened
    # The world the plan was made from, when the caller planned an instant before
    # (`tableflow run`, `apply --auto-approve`): then the plan is not checked for
    # staleness (the world is not read again). Each table's run still refuses to commit
    # if its offsets moved since the plan.
    world: WorldState | None = None
    console: Console = field(default_factory=lambda: Console(stderr=True))
    lock_timeout_s: float = 0.0
    max_parallel: int = 4
    results_path: Path | None = None
    # Optional decoder factory passed to the engine (tests of failure paths).
    decoder_factory: Callable[[Any], Any] | None = None
    # `tableflow run`: a table stopped by bad records (on_error fail) is suspended.
    suspend_on_bad_records: bool = False
    # `tableflow run`'s lanes: the results file keeps the entries of the tables this
    # apply does not run (`runner/results.py` merge_run_results).
    merge_results: bool = False

    def run(self) -> RunResults:
        plan = self.plan
        if plan.blockers:
            listed = "\n".join(f"  - {b.message} ({b.location or b.table})" for b in plan.blockers)
            raise PlanNotApplicableError(f"the plan cannot be applied:\n{listed}")
        tables = tuple(self.project.table(name) for name in plan.tables)
        freeze_startup_heap()
        started_at, began = datetime.now(UTC), time.monotonic()
        lock_dir = self.project.root / "target" / "locks"
        with (
            table_locks(lock_dir, plan.tables, self.lock_timeout_s, base=self.project.root),
            use_catalog(self.project, self.handle) as handle,
        ):
            if self.world is None:
                self._refuse_if_stale(plan, tables, handle)
            outcomes: dict[str, TaskOutcome] = {}
            if plan.dag.tasks:
                context = ApplyContext(
                    self.project,
                    plan,
                    self._spark_source(handle),
                    handle,
                    self.decoder_factory,
                    self.suspend_on_bad_records,
                )
                with ApplyProgress(self.console, len(plan.dag.tasks)) as progress:
                    outcomes = execute_dag(
                        plan.dag,
                        lambda task: run_task(context, task),
                        max_workers=self.max_parallel,
                        on_event=progress.on_event,
                        describe_error=lambda exc: _describe(self.project, exc),
                    )
        results = _results(
            self.project, plan, tables, outcomes, started_at, time.monotonic() - began
        )
        path = self.results_path or self.project.root / "target" / "run_results.json"
        inside = path.absolute().is_relative_to(self.project.root)
        write = merge_run_results if self.merge_results else write_run_results
        write(results, path, base=self.project.root if inside else None)
        return results

    def _refuse_if_stale(
        self, plan: Plan, tables: tuple[Table, ...], handle: CatalogHandle
    ) -> None:
        """StalePlanError if the plan was made from another world than the one now."""
        world = read_world(
            self.project,
            tables,
            handle,
            list_undeclared=False,
            read_kafka=False,
            read_published=False,
        )
        current = [
            table_fingerprint(
                t,
                world.tables.get(t.identifier),
                world.schemas.get(t.name),
                world.key_schemas.get(t.name),
            )
            for t in tables
        ]
        reasons = stale_reasons(plan, current, config_hash(self.project, tables))
        if reasons:
            raise StalePlanError(reasons)

    def _spark_source(self, handle: CatalogHandle) -> SparkOnDemand:
        """The Spark application the tasks wait for when they first need it (a starter's
        starts then unless its owner started it): DDL through the catalog and the runs'
        branches go ahead while the JVM starts."""
        catalog = (handle.spark_name, handle.spark_properties)
        if self.spark is not None:
            return SparkOnDemand.of_session(self.spark, catalog)
        starter = self.spark_starter
        if starter is None:
            project = self.project
            starter = SessionStarter(
                lambda: project_spark_session(project, dict([catalog]), short_lived=True)
            )
            catalog_to_register = None  # in the application's own conf
        else:
            built_with = starter.catalogs.get(handle.spark_name)
            catalog_to_register = None if built_with == handle.spark_properties else catalog
        return SparkOnDemand(
            starter.get, catalog_to_register, wait_for_pyspark=starter.wait_for_pyspark
        )


def needs_spark(plan: Plan) -> bool:
    """Whether applying `plan` is expected to need the Spark application: not when the
    actions it takes (reports, such as maintenance due, take none) are only ingests of
    upsert tables it does not create, of at most `DRIVER_READ_MAX_RECORDS` records in all,
    which the driver reads and merges (`shared_run.reads_in_driver`; starting the JVM
    beside such an apply cost it ~1 s and ~230 MB, docs/architecture.md). A guess from the
    plan alone: a table found empty when its run starts, or holding more rows than the
    driver merges, gets Spark then."""
    ingests = [a for a in plan.changes if isinstance(a, Ingest)]
    return (
        len(ingests) != len(plan.changes)
        or any(a.mode != "upsert" for a in ingests)
        or sum(a.records for a in ingests) > DRIVER_READ_MAX_RECORDS
    )


def project_spark_session(
    project: Project,
    catalogs: dict[str, dict[str, str]] | None = None,
    *,
    short_lived: bool = False,
    service: bool = False,
) -> SparkSession:
    """The Spark application the target's `spark` settings describe (FAIR scheduling:
    each table's jobs run in their own pool). `short_lived`: it ends with the command;
    `service`: it serves `tableflow run` (engine/spark_session.py)."""

    settings = project.target.spark
    conf = {"spark.scheduler.mode": "FAIR", **{k: str(v) for k, v in settings.conf.items()}}
    return build_spark_session(
        settings.master,
        settings.app_name,
        conf,
        list(settings.packages),
        catalogs,
        short_lived=short_lived,
        share_classes=settings.class_data_sharing,
        iceberg=settings.iceberg_jars,
        java_options=object_store_java_options(project.target.catalog),
        service=service,
    )


def _describe(project: Project, exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    text = " ".join(lines[:3]) if lines else type(exc).__name__
    return project.redact(f"{type(exc).__name__}: {text}"[:600])


@dataclass(frozen=True)
class _MemberTask:
    """A table's place in a shared ingest job, counted among the table's tasks."""

    id: str
    kind: str = "ingest"


def _member_outcomes(
    project: Project, plan: Plan, outcomes: dict[str, TaskOutcome]
) -> dict[str, TaskOutcome]:
    """Each shared job member's run as the outcome of a task `ingest:<table>` of its own:
    success with its IngestOutcome, error with what stopped it (and what the run knew,
    e.g. its checks' report), skipped when the job did not run it (its DDL failed)."""
    found: dict[str, TaskOutcome] = {}
    for task in plan.dag.tasks:
        if not task.members:
            continue
        outcome = outcomes.get(task.id)
        for member in task.members:
            task_id = f"ingest:{member.table}"
            value = outcome.value if outcome is not None and outcome.value else {}
            result = value.get(member.table)
            if outcome is not None and outcome.status == "error":
                found[member.table] = TaskOutcome(task_id, "error", error=outcome.error)
            elif result is None:
                why = f"skipped: the DDL of {member.table} did not succeed"
                found[member.table] = TaskOutcome(task_id, "skipped", error=why)
            elif isinstance(result, BaseException):
                error = _describe(project, result)
                partial = getattr(result, "outcome", None)  # what the failed run knew
                found[member.table] = TaskOutcome(task_id, "error", partial, error=error)
            else:
                found[member.table] = TaskOutcome(
                    task_id, "success", result, duration_s=result.duration_s
                )
    return found


def _planned_ingest(plan: Plan, table: str) -> Ingest | None:
    return next((a for a in plan.actions_for(table) if isinstance(a, Ingest)), None)


def _results(
    project: Project,
    plan: Plan,
    tables: tuple[Table, ...],
    outcomes: dict[str, TaskOutcome],
    started_at: datetime,
    duration_s: float,
) -> RunResults:
    table_results = []
    finished_at = datetime.now(UTC).isoformat()
    tasks_of: dict[str, list[Any]] = {}
    for task in plan.dag.tasks:
        if task.table is not None:
            tasks_of.setdefault(task.table, []).append(task)
    members = _member_outcomes(project, plan, outcomes)
    for table in tables:
        tasks = tasks_of.get(table.name, [])
        mine = [outcomes[t.id] for t in tasks if t.id in outcomes]
        if table.name in members:  # its run in a shared job, as if it were a task of its own
            tasks = [*tasks, _MemberTask(members[table.name].task_id)]
            mine.append(members[table.name])
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
        planned = _planned_ingest(plan, table.name)
        if ingest is None and planned is not None:  # it failed before it started
            committed = {
                p.partition: p.committed for p in planned.partitions if p.committed is not None
            }
            values = {
                "offsets_before": committed,
                "offsets_after": dict(committed),
                "warnings": (*planned.warnings, *planned.describe_lost()),
            }
        if ingest is not None:
            values = {
                "records_read": ingest.records_read,
                "records_written": ingest.records_written,
                "records_skipped": ingest.failures + ingest.rows_skipped,
                "offsets_before": dict(ingest.offsets_before),
                "offsets_after": dict(ingest.offsets_after),
                "snapshot_id": ingest.snapshot_id,
                "committed_at_ms": getattr(ingest, "committed_at_ms", None),
                "warnings": tuple(ingest.warnings),
                "transforms": ingest.transforms,
                "checks": ingest.checks,
                "timings": getattr(ingest, "timings", None),
                "records_lost": sum(end - start for start, end in ingest.lost.values()),
                "lost_offsets": dict(ingest.lost),
            }
            accounting = getattr(ingest, "accounting", None)
            if accounting is not None:
                totals = accounting["totals"]
                values.update(
                    records_written=totals["written"],
                    records_skipped=totals["skipped"],
                    records_dead_lettered=totals["dead_lettered"],
                    accounting={**accounting, "lost": values["lost_offsets"]}
                    if ingest.lost
                    else accounting,
                )
        kinds = {t.id: t.kind for t in tasks}
        done = [o for o in mine if o.status == "success" and o.value is not None]
        values["published"] = tuple(
            e.describe() for o in done if kinds[o.task_id] == "publish" for e in o.value.entries
        )
        delta = next((o.value for o in done if kinds[o.task_id] == "sync_delta"), None)
        values["delta_version"] = delta.version if delta is not None else None
        table_results.append(
            TableResult(
                table=table.name,
                identifier=table.identifier,
                status=status,
                ddl=ddl,
                duration_s=round(sum(o.duration_s for o in mine), 3),
                error="; ".join(errors) or None,
                finished_at=finished_at,
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
        finished_at=finished_at,
        duration_s=round(duration_s, 3),
        status="error" if failed else "success",
        plan_summary=plan.summary_line(),
        tables=tuple(table_results),
        errors=other_errors,
    )
