"""Running one DAG task with Spark: task kinds and DDL actions, each found in a registry."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tableflow_core.config.project import Project
from tableflow_core.deadletter.sinks.iceberg_table import create_dlq_table
from tableflow_core.deadletter.suspension import Suspension, clear_suspension, suspend
from tableflow_core.deadletter.topics import create_dlq_topic
from tableflow_core.delta import sync_delta_log
from tableflow_core.delta.storage import storage_options_of
from tableflow_core.engine import ddl
from tableflow_core.engine.catalog_create import (
    create_namespace_as_spark_does,
    create_table_as_spark_does,
    create_table_in_process,
    creates_as_spark_does,
)
from tableflow_core.engine.spark_session import SparkOnDemand
from tableflow_core.errors import (
    ConcurrentCommitError,
    DataLossError,
    IngestError,
    TableflowError,
)
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.ingest.upsert_order import deletes_table
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.pipeline.run import ingest
from tableflow_core.pipeline.shared_run import SharedMember, ingest_shared
from tableflow_core.plan.actions import (
    ChangePartitionSpec,
    ChangeSortOrder,
    CreateTable,
    CreateTopic,
    EvolveSchema,
    Ingest,
    ReplaceTable,
    TableDefinition,
    UpdateProperties,
)
from tableflow_core.plan.dag import DagTask, publish_catalog
from tableflow_core.plan.plan import Plan
from tableflow_core.publish import PublishError, publish_table
from tableflow_core.runner.binding import bind_spec
from tableflow_core.schemas.evolution import SchemaDiff
from tableflow_core.sql_text import quote_ident
from tableflow_core.targets.kafka import kafka_consumer_config
from tableflow_core.targets.storage import ObjectStoreError, describe_store, object_store_failure

# Namespace creation of every apply in the process (`ApplyContext.ensure_namespace`).
_NAMESPACES = threading.Lock()


@dataclass
class ApplyContext:
    """What every task of one apply shares. The plan says what to do; the project gives
    only the target's connections and the secrets a plan never holds (runner/binding.py).

    `spark_source` gives the Spark application when a task first uses `spark`: it may
    still be starting while the tasks that need no Spark run (DDL through a REST
    catalog, a run's branch)."""

    project: Project
    plan: Plan
    spark_source: SparkOnDemand
    handle: Any  # CatalogHandle
    decoder_factory: Callable[[Any], Any] | None = None
    suspend_on_bad_records: bool = False  # `tableflow run`: suspend instead of only failing
    # Namespaces this apply made sure exist: one CREATE NAMESPACE per namespace, not one
    # per table created (1,000 new tables were 2,000 Spark statements).
    _namespaces: set[tuple[str, ...]] = field(default_factory=set, repr=False)
    # The DAG task each thread runs, whose job group its Spark jobs get (`spark`).
    _running: threading.local = field(default_factory=threading.local, repr=False)

    @property
    def spark(self) -> Any:
        """The Spark application (waited for), with the current task's job group and FAIR
        pool set on this thread (no-op under FIFO mode)."""
        spark = self.spark_source.session()
        task = getattr(self._running, "task", None)
        if task is not None and getattr(self._running, "grouped", None) != task.id:
            sc = spark.sparkContext
            sc.setJobGroup(f"tableflow:{task.id}", f"tableflow {task.id}", interruptOnCancel=True)
            sc.setLocalProperty("spark.scheduler.pool", task.table or "tableflow")
            self._running.grouped = task.id
        return spark

    @contextmanager
    def running(self, task: DagTask) -> Iterator[None]:
        """`task` runs on this thread: the Spark jobs it starts get its job group."""
        self._running.task, self._running.grouped = task, None
        try:
            yield
        finally:
            self._running.task = None

    def ident(self, dotted: str) -> str:
        return ".".join(quote_ident(p) for p in (self.handle.spark_name, *dotted.split(".")))

    @property
    def creates_without_spark(self) -> bool:
        """Namespaces and plain tables are created through the target's REST catalog with
        the requests Spark's would send (engine/catalog_create.py), not by Spark."""
        return creates_as_spark_does(self.handle.catalog, self.handle.spark_properties)

    def ensure_namespace(self, namespace: tuple[str, ...]) -> None:
        """CREATE NAMESPACE IF NOT EXISTS, once per apply (tables of the namespace created
        concurrently wait for the first), one at a time in the process (`tableflow run`'s
        lanes apply at once: two creating a namespace together made the embedded catalog
        answer 500, a UNIQUE constraint of its SQL store); through the REST catalog when
        it can be."""
        with _NAMESPACES:
            if namespace not in self._namespaces:
                if self.creates_without_spark:
                    create_namespace_as_spark_does(self.handle.catalog, namespace)
                else:
                    quoted = (self.handle.spark_name, *namespace)
                    ddl.create_namespace(self.spark, ".".join(map(quote_ident, quoted)))
                self._namespaces.add(namespace)


TaskRunner = Callable[[ApplyContext, DagTask], Any]
TASK_RUNNERS: dict[str, TaskRunner] = {}
# (context, the table's Spark identifier, the action)
ActionRunner = Callable[[ApplyContext, str, Any], None]
ACTION_RUNNERS: dict[type, ActionRunner] = {}


def task_runner(kind: str) -> Callable[[TaskRunner], TaskRunner]:
    def register(fn: TaskRunner) -> TaskRunner:
        TASK_RUNNERS[kind] = fn
        return fn

    return register


def action_runner(kind: type) -> Callable[[ActionRunner], ActionRunner]:
    def register(fn: ActionRunner) -> ActionRunner:
        ACTION_RUNNERS[kind] = fn
        return fn

    return register


def run_task(context: ApplyContext, task: DagTask) -> Any:
    """Run `task`; each table's Spark jobs get their own group and FAIR pool, set when the
    task first uses Spark (a task that needs none does not wait for the JVM)."""
    runner = TASK_RUNNERS.get(task.kind)
    if runner is None:
        raise NotImplementedError(f"task kind {task.kind} is not supported yet")
    try:
        with context.running(task):
            return runner(context, task)
    except Exception as exc:
        named = _store_failure(context, exc, task.id, task.table)
        if named is None:
            raise
        raise named from exc


def _store_failure(
    context: ApplyContext, exc: BaseException, step: str, table: str | None
) -> ObjectStoreError | None:
    """`exc` as an ObjectStoreError naming the store, the step and the table, when the
    object store caused it; None otherwise."""
    storage = context.handle.storage
    cause = object_store_failure(exc) if storage is not None else None
    if storage is None or cause is None or isinstance(exc, ObjectStoreError):
        return None
    store = describe_store(storage, getattr(context.handle.catalog, "properties", {}))
    return ObjectStoreError(
        f"{store} failed during {step} (table {table or '-'}): {cause}. "
        "Nothing of this step was published; a re-run continues from the table's "
        "committed offsets."
    )


@task_runner("create_namespace")
def _create_namespace(context: ApplyContext, task: DagTask) -> None:
    namespace = context.plan.action(task.actions[0]).identifier
    context.ensure_namespace(tuple(namespace.split(".")))


@task_runner("create_dlq_table")
def _create_dlq_table(context: ApplyContext, task: DagTask) -> None:

    action = context.plan.action(task.actions[0])
    assert isinstance(action, CreateTable)
    create_dlq_table(
        context.spark, context.handle.spark_name, action.identifier, dict(action.properties)
    )


@task_runner("create_dlq_topic")
def _create_dlq_topic(context: ApplyContext, task: DagTask) -> bool:

    action = context.plan.action(task.actions[0])
    assert isinstance(action, CreateTopic)
    kafka_conf = kafka_consumer_config(context.project.target.kafka)
    return create_dlq_topic(kafka_conf, action.identifier, action.partitions)


@task_runner("drop_table")
def _drop_table(context: ApplyContext, task: DagTask) -> None:
    identifier = context.plan.action(task.actions[0]).identifier
    ddl.drop_table(context.spark, context.ident(identifier))


@task_runner("ddl")
def _ddl(context: ApplyContext, task: DagTask) -> list[str]:
    assert task.table is not None
    done = []
    for action_id in task.actions:
        action = context.plan.action(action_id)
        runner = ACTION_RUNNERS.get(type(action))
        if runner is None:
            raise ValueError(f"unknown DDL action {action.kind}")
        runner(context, context.ident(action.identifier), action)
        done.append(action.id)
    return done


def _member(context: ApplyContext, action_id: str) -> SharedMember:
    """What one table's run needs from the plan: its spec bound to the target, its ranges,
    the committed offsets the plan was made from and where each partition starts."""
    action = context.plan.action(action_id)
    assert isinstance(action, Ingest)
    spec = bind_spec(action.spec, context.project, context.handle.spark_name)
    plan = context.plan
    replaced = any(a.kind == "replace_table" for a in plan.actions_for(spec.table_name))
    seen = plan.fingerprint(spec.table_name)
    expected = {} if replaced or seen is None else dict(seen.committed_offsets or {})
    return SharedMember(
        spec=spec,
        ranges=tuple(OffsetRange(action.topic, r.partition, r.start, r.end) for r in action.ranges),
        expected_start=expected,
        start_offsets={p.partition: p.start for p in action.partitions},
        warnings=(*action.warnings, *action.describe_lost()),
    )


@task_runner("ingest")
def _ingest(context: ApplyContext, task: DagTask) -> Any:
    assert task.table is not None
    action = context.plan.action(task.actions[0])
    assert isinstance(action, Ingest)
    member = _member(context, task.actions[0])
    spec = member.spec
    if action.lost and action.on_data_loss == "fail":
        raise DataLossError(
            f"table {spec.table_name}: " + "; ".join(action.describe_lost()) + ". Nothing was "
            "read or committed. To read on from the log start and record the loss, set "
            "`on_data_loss: accept` on the table (or in `defaults`)."
        )
    with _suspending(context, spec):
        outcome = ingest(
            context.spark,
            spec,
            member.ranges,
            kafka_consumer_config(context.project.target.kafka),
            member.expected_start,
            start_offsets=member.start_offsets,
            warnings=list(member.warnings),
            lost={lost.partition: (lost.start, lost.end) for lost in action.lost},
            decoder_factory=context.decoder_factory,
            catalog=context.handle,
        )
    _resumed(context, spec)
    return outcome


@task_runner("ingest_shared")
def _ingest_shared(context: ApplyContext, task: DagTask) -> dict[str, Any]:
    """The runs whose read tasks write their data files, in one Spark job
    (pipeline/shared_run.py): each table's IngestOutcome, or the error that stopped its
    run (the object store's named as in `run_task`), by table name."""
    members = [_member(context, m.action) for m in task.members]
    results = ingest_shared(
        lambda: context.spark,  # waited for once the tables' runs started
        members,
        kafka_consumer_config(context.project.target.kafka),
        catalog=context.handle,
        decoder_factory=context.decoder_factory,
    )
    outcomes: dict[str, Any] = {}
    for member in members:
        spec = member.spec
        result = results[spec.table_name]
        try:
            with _suspending(context, spec):
                if isinstance(result, BaseException):
                    raise _store_failure(context, result, task.id, spec.table_name) or result
            _resumed(context, spec)
            outcomes[spec.table_name] = result
        except Exception as exc:
            outcomes[spec.table_name] = exc
    return outcomes


def _resumed(context: ApplyContext, spec: IngestSpec) -> None:
    """A successful apply resumes a table `tableflow run` suspended."""
    if spec.table_name in context.plan.suspended:
        identifier = ".".join((*spec.namespace, spec.table))
        clear_suspension(context.handle.catalog, identifier, context.handle.address)


@contextmanager
def _suspending(context: ApplyContext, spec: IngestSpec) -> Iterator[None]:
    """Under `tableflow run`, a run stopped by bad records (on_error fail) suspends the
    table (a table property naming the offset) instead of only failing."""

    try:
        yield
    except IngestError as exc:
        if not context.suspend_on_bad_records or not exc.failures:
            raise
        if isinstance(exc, ConcurrentCommitError):
            raise

        first = exc.failures[0]
        suspension = Suspension.now(
            first.reason, first.topic, first.partition, first.offset, exc.run_id or "?"
        )
        identifier = ".".join((*spec.namespace, spec.table))
        suspend(context.handle.catalog, identifier, suspension, context.handle.address)
        suspended = TableSuspendedError(f"table {spec.table_name} {suspension.describe()} ({exc})")
        suspended.outcome = exc.outcome
        raise suspended from exc


SUSPENDED_MARK = "suspended since"  # in the error text of a table `run` just suspended


class TableSuspendedError(TableflowError, RuntimeError):
    """`tableflow run` suspended the table: its run stopped on bad records. `outcome`: what
    the run knew (IngestError.outcome)."""

    outcome: object | None = None


def _load_table(context: ApplyContext, table_name: str) -> Any:
    """The table as committed now (pyiceberg, read fresh from the catalog)."""
    table = context.project.table(table_name)
    return context.handle.catalog.load_table((*table.namespace, table.table))


@task_runner("publish")
def _publish(context: ApplyContext, task: DagTask) -> Any:
    """Point one `publish_to` catalog at the table's current metadata. Runs after the
    table's commits; a failure leaves the Iceberg commit in place and fails the task."""
    from dataclasses import replace

    assert task.table is not None
    table = context.project.table(task.table)
    loaded = _load_table(context, task.table)
    one = replace(table, publish_to=(publish_catalog(task),))
    result = publish_table(
        context.project, one, loaded.metadata_location, file_io=dict(loaded.io.properties)
    )
    if not result.ok:
        raise PublishError(f"the table's commits stand; publishing failed: {result.summary_line()}")
    return result


@task_runner("sync_delta")
def _sync_delta(context: ApplyContext, task: DagTask) -> Any:
    """Mirror the table's current snapshot in its Delta log (`formats: [.., delta]`)."""

    assert task.table is not None
    loaded = _load_table(context, task.table)
    return sync_delta_log(loaded, storage_options=storage_options_of(loaded))


@action_runner(CreateTable)
def _create_table(context: ApplyContext, identifier: str, action: CreateTable) -> None:
    """An unpartitioned, unordered table through the catalog, without Spark, when the
    catalog is in this process or a REST catalog (engine/catalog_create.py); else Spark's
    CREATE TABLE."""
    names = tuple(action.identifier.split("."))
    context.ensure_namespace(names[:-1])
    if (
        not action.partition_by
        and not action.sort_by
        and _created_without_spark(context, names, action)
    ):
        return
    _create_with_spark(context, identifier, action, with_namespace=False)


def _create_with_spark(
    context: ApplyContext,
    identifier: str,
    action: TableDefinition,
    *,
    with_namespace: bool = True,
) -> None:
    """Spark's CREATE TABLE of the table `action` describes."""
    ddl.create_table(
        context.spark,
        identifier,
        action.table_schema,
        action.partition_by,
        action.sort_by,
        action.properties,
        with_namespace=with_namespace,
    )


def _created_without_spark(
    context: ApplyContext, names: tuple[str, ...], action: CreateTable
) -> bool:
    service = context.handle.in_process_service
    if service is None and not context.creates_without_spark:
        return False
    # The request converts the columns with pyspark's type functions (no JVM).
    context.spark_source.wait_for_pyspark()
    schema, properties = action.table_schema, action.properties
    if service is not None:
        return create_table_in_process(service, names, schema, properties)
    return create_table_as_spark_does(context.handle.catalog, names, schema, properties)


@action_runner(ReplaceTable)
def _replace_table(context: ApplyContext, identifier: str, action: ReplaceTable) -> None:
    ddl.drop_table(context.spark, identifier)
    # An upsert table's memory of deletes goes with its rows (ingest/upsert_order.py).
    ddl.drop_table(context.spark, deletes_table(identifier))
    _create_with_spark(context, identifier, action)


@action_runner(EvolveSchema)
def _evolve_schema(context: ApplyContext, identifier: str, action: EvolveSchema) -> None:
    ddl.apply_schema_changes(
        context.spark, identifier, SchemaDiff(action.changes, ()), action.table_schema
    )


@action_runner(UpdateProperties)
def _update_properties(context: ApplyContext, identifier: str, action: UpdateProperties) -> None:
    ddl.set_properties(context.spark, identifier, action.set)


@action_runner(ChangePartitionSpec)
def _change_partition_spec(
    context: ApplyContext, identifier: str, action: ChangePartitionSpec
) -> None:
    ddl.change_partition_spec(context.spark, identifier, action.current, action.desired)


@action_runner(ChangeSortOrder)
def _change_sort_order(context: ApplyContext, identifier: str, action: ChangeSortOrder) -> None:
    ddl.change_sort_order(context.spark, identifier, action.desired)
