"""The apply DAG as data: compiling plan actions into tasks, and ordering them.

Per table: DDL first (create / alter / replace), then ingest (the table's pipeline of
stages, ingest/stages.py: read ranges -> decode -> transforms -> checks -> route bad
records -> write -> publish), then, after whichever committed last, publish to extra
catalogs (one task per catalog of `publish_to`) and sync the Delta log (tables with
`formats: [.., delta]`). A `publish_table` action alone (stale pointers, nothing to
commit) gives publish tasks for its catalogs only. Namespaces come before
their tables; tables do not depend on each other, so the executor runs them
concurrently. Pure: `runner/` executes a Dag, the plan never imports `runner/`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tableflow_core.errors import TableflowError
from tableflow_core.ingest.sharing import (
    Candidate,
    needs_spark_merge,
    needs_spark_writer,
    shared_jobs,
)
from tableflow_core.plan.actions import DDL_KINDS
from tableflow_core.plan.dead_letter_table import is_dlq_action


class DagMember(BaseModel):
    """One table of a task many tables share (a shared ingest job): its ingest action and
    the tasks it waits for. A member whose dependencies failed is left out of the task;
    the others still run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    table: str
    action: str = Field(description="Id of the table's ingest action")
    depends_on: tuple[str, ...] = ()


class DagTask(BaseModel):
    """One node of the apply DAG. `stages` are the steps run inside it, in order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    kind: Literal[
        "create_namespace",
        "create_dlq_table",
        "create_dlq_topic",
        "ddl",
        "ingest",
        "ingest_shared",
        "publish",
        "sync_delta",
        "drop_table",
    ]
    table: str | None = None
    depends_on: tuple[str, ...] = ()
    actions: tuple[str, ...] = Field(default=(), description="Ids of the plan actions it performs")
    stages: tuple[str, ...] = ()
    members: tuple[DagMember, ...] = Field(
        default=(),
        description="The tables of a shared ingest job (ingest/sharing.py), each published "
        "on its own",
    )

    def with_members(self, members: tuple[DagMember, ...]) -> DagTask:
        """This task for `members` only (those whose dependencies succeeded)."""
        return self.model_copy(
            update={"members": members, "actions": tuple(m.action for m in members)}
        )


class Dag(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: tuple[DagTask, ...] = ()

    def task(self, task_id: str) -> DagTask:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)


class DagError(TableflowError, ValueError):
    """The DAG is malformed (unknown dependency or a cycle)."""


def compile_dag(actions: Sequence[Any], tables: Mapping[str, Any]) -> Dag:
    """`tables`: the project's tables by name (for publish_to)."""
    tasks: list[DagTask] = []
    namespace_task: dict[str, str] = {}
    dlq_task: dict[str, str] = {}  # dead-letter table identifier -> its creating task
    for action in actions:
        if action.kind == "create_namespace":
            task_id = f"namespace:{action.identifier}"
            namespace_task[action.identifier] = task_id
            tasks.append(
                DagTask(
                    id=task_id,
                    kind="create_namespace",
                    actions=(action.id,),
                    stages=("create_namespace",),
                )
            )
        elif is_dlq_action(action):
            namespace = action.identifier.rsplit(".", 1)[0]
            dlq_task[action.identifier] = f"dlq:{action.identifier}"
            tasks.append(
                DagTask(
                    id=dlq_task[action.identifier],
                    kind="create_dlq_table",
                    depends_on=(namespace_task[namespace],) if namespace in namespace_task else (),
                    actions=(action.id,),
                    stages=("create_dlq_table",),
                )
            )
        elif action.kind == "create_topic":
            dlq_task[f"topic:{action.identifier}"] = f"dlq_topic:{action.identifier}"
            tasks.append(
                DagTask(
                    id=dlq_task[f"topic:{action.identifier}"],
                    kind="create_dlq_topic",
                    actions=(action.id,),
                    stages=("create_dlq_topic",),
                )
            )
        elif action.kind == "drop_table":
            tasks.append(
                DagTask(
                    id=f"drop:{action.identifier}",
                    kind="drop_table",
                    actions=(action.id,),
                    stages=("drop_table",),
                )
            )
    by_table: dict[str, list[Any]] = {}
    for action in actions:
        if action.table is not None:
            by_table.setdefault(action.table, []).append(action)
    jobs = shared_jobs(
        [
            Candidate(name, ingest.records)
            for name, table_actions in by_table.items()
            if (ingest := _ingest_of(table_actions)) is not None
            and _can_share(ingest, tables.get(name), _creates_table(table_actions))
        ]
    )
    shared = {name for job in jobs for name in job}
    members: dict[str, DagMember] = {}
    for name in sorted(by_table):
        table_actions = by_table[name]
        config = tables.get(name)
        last: str | None = None
        ddl = [a for a in table_actions if a.kind in DDL_KINDS]
        if ddl:
            namespace = ddl[0].identifier.rsplit(".", 1)[0]
            depends = (namespace_task[namespace],) if namespace in namespace_task else ()
            last = f"ddl:{name}"
            tasks.append(
                DagTask(
                    id=last,
                    kind="ddl",
                    table=name,
                    depends_on=depends,
                    actions=tuple(a.id for a in ddl),
                    stages=tuple(a.kind for a in ddl),
                )
            )
        ingest = [a for a in table_actions if a.kind == "ingest"]
        if ingest:
            stages = [stage.label() for stage in ingest[0].stages]
            task_id = f"ingest:{name}"
            target: Any = getattr(config, "dlq", None)
            topic = getattr(target, "topic", None)
            dlq = getattr(target, "table", None) or (f"topic:{topic}" if topic else None)
            depends_on = tuple(
                t for t in (last, dlq_task.get(dlq) if dlq else None) if t is not None
            )
            if name in shared:  # no task of its own; nothing of the table comes after it
                members[name] = DagMember(table=name, action=ingest[0].id, depends_on=depends_on)
                continue
            tasks.append(
                DagTask(
                    id=task_id,
                    kind="ingest",
                    table=name,
                    depends_on=depends_on,
                    actions=(ingest[0].id,),
                    stages=tuple(stages),
                )
            )
            last = task_id
        if config is None:
            continue
        publish = [a for a in table_actions if a.kind == "publish_table"]
        catalogs: tuple[str, ...] = ()
        if last is not None:
            catalogs = tuple(config.publish_to)
        elif publish:
            catalogs = tuple(publish[0].catalogs)
        for catalog in catalogs:
            tasks.append(
                DagTask(  # publish_catalog() reads the catalog back from the id
                    id=f"publish:{name}:{catalog}",
                    kind="publish",
                    table=name,
                    depends_on=(last,) if last else (),
                    actions=(publish[0].id,) if publish else (),
                    stages=("register_in_catalog",),
                )
            )
        if last is not None and "delta" in getattr(config, "formats", ()):
            tasks.append(
                DagTask(
                    id=f"delta:{name}",
                    kind="sync_delta",
                    table=name,
                    depends_on=(last,),
                    stages=("sync_delta_log",),
                )
            )
    for number, job in enumerate(jobs, start=1):
        job_members = tuple(members[name] for name in job)
        tasks.append(
            DagTask(
                id=f"{SHARED_TASK_PREFIX}{number}",
                kind="ingest_shared",
                depends_on=tuple(sorted({d for m in job_members for d in m.depends_on})),
                actions=tuple(m.action for m in job_members),
                stages=SHARED_STAGES,
                members=job_members,
            )
        )
    return Dag(tasks=tuple(tasks))


SHARED_TASK_PREFIX = "ingest_shared:"
# What a shared job runs (pipeline/shared_run.py): one Spark job for all its tables, then
# each table's own publish.
SHARED_STAGES = (
    "read_ranges(every table's)",
    "decode",
    "route_bad_records",
    "write(data files, in the read tasks; upsert: merged on the driver)",
    "publish(each table on its own)",
)


def _ingest_of(table_actions: Sequence[Any]) -> Any:
    return next((a for a in table_actions if a.kind == "ingest"), None)


# DDL actions after which the table has no rows: its run is a first load.
_NEW_TABLE_KINDS = frozenset({"create_table", "replace_table"})


def _creates_table(table_actions: Sequence[Any]) -> bool:
    return any(a.kind in _NEW_TABLE_KINDS for a in table_actions)


def _can_share(ingest: Any, config: Any, first_load: bool = False) -> bool:
    """A table whose run can share a job: small and plain (ingest/sharing.py), with
    nothing to do after its commit (publish_to catalogs, a Delta mirror) and no records
    lost to retention (its own run fails or records the loss)."""
    if config is not None and (config.publish_to or "delta" in getattr(config, "formats", ())):
        return False
    if getattr(ingest, "lost", ()):
        return False
    if ingest.records == 0:  # only a `row_count` check's verdict on its empty batch
        return False
    if needs_spark_merge(ingest.spec, ingest.records, first_load) is not None:
        return False
    return needs_spark_writer(ingest.spec) is None


def publish_catalog(task: DagTask) -> str:
    """The publish catalog of a `publish` task (`publish:<table>:<catalog>`)."""
    return task.id.split(":", 2)[2]


def topological_order(dag: Dag) -> list[DagTask]:
    """Tasks in an order where every task comes after its dependencies."""
    by_id = {t.id: t for t in dag.tasks}
    for task in dag.tasks:
        for dep in task.depends_on:
            if dep not in by_id:
                raise DagError(f"task {task.id} depends on unknown task {dep}")
    ordered: list[DagTask] = []
    state: dict[str, str] = {}

    def visit(task: DagTask) -> None:
        mark = state.get(task.id)
        if mark == "done":
            return
        if mark == "visiting":
            raise DagError(f"cycle through task {task.id}")
        state[task.id] = "visiting"
        for dep in task.depends_on:
            visit(by_id[dep])
        state[task.id] = "done"
        ordered.append(task)

    for task in dag.tasks:
        visit(task)
    return ordered


def render_dag(dag: Dag) -> list[str]:
    """One line per task: `id [stage -> stage] <- deps`; a shared job lists its tables."""
    lines = []
    for task in topological_order(dag):
        stages = " -> ".join(task.stages)
        if task.members:
            tables = ", ".join(m.table for m in task.members)
            after = "; each after its own DDL" if task.depends_on else ""
            lines.append(f"{task.id}: {stages}  ({len(task.members)} tables: {tables}{after})")
            continue
        deps = f"  (after {', '.join(task.depends_on)})" if task.depends_on else ""
        lines.append(f"{task.id}: {stages}{deps}")
    return lines
