"""What a stage runner receives (a context) and passes on (a batch, with typed counts
and audits)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tableflow_core.deadletter.accounting import RunAccounting
from tableflow_core.engine.observations import observed_metrics
from tableflow_core.ingest.compiled import CompiledTable
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.pipeline.task_keys import KeyReports
from tableflow_core.pipeline.transforms.spark import TransformCounts, TransformResult
from tableflow_core.sql_text import quote_ident

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation, SparkSession


@dataclass(frozen=True)
class StageContext:
    """Everything fixed for one table's run."""

    spark: SparkSession
    spec: IngestSpec
    run_id: str
    branch: str  # the run's private branch; stages write here, publish fast-forwards main
    ranges: tuple[OffsetRange, ...]
    offsets_after: Mapping[int, int]  # committed with the data
    expected_start: Mapping[int, int]  # committed offsets the plan was made from
    kafka_conf: Mapping[str, str]
    catalog: Any = None  # the target's CatalogHandle (pyiceberg access), when apply has one
    decoder_factory: Callable[[Any], Any] | None = None  # tests of failure paths
    # Run by the engine when the run ends, committed or not (e.g. unpersist a cached batch).
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    base_snapshot_id: int | None = None  # main's snapshot the branch was cut at
    # Rows in the table at that snapshot (its summary's total-records); None: not known.
    base_rows: int | None = None
    # Other run branches seen before the run: dead once main moves, removed by the publish.
    other_branches: tuple[str, ...] = ()
    # Summary properties audits add to the publish commit (e.g. the run's accounting).
    publish_properties: dict[str, str] = field(default_factory=dict)
    # Wall seconds of the run's phases, by name (run_results.json `timings`): the engine's
    # own (load, start_run), each stage runner's, and parts a runner times (e.g. merge).
    timings: dict[str, float] = field(default_factory=dict)
    # What the run warns about (run_results.json `warnings`, and the console): stages and
    # audits add lines when they learn something the user must see, e.g. null values
    # an append table does not write.
    warnings: list[str] = field(default_factory=list)
    # Whether the read tasks may run the table's dedup (pipeline/transforms/read_task_dedup.py): not
    # after a run whose read tasks kept a key twice, nor when that run is being redone.
    dedup_in_read_tasks: bool = True

    @property
    def branch_identifier(self) -> str:

        return f"{self.spec.identifier}.{quote_ident('branch_' + self.branch)}"

    def where(self) -> str:
        return f"table {self.spec.table_name} ({self.spec.identifier}), topic {self.spec.topic!r}"

    def compiled(self, needed_for: str) -> CompiledTable:
        """The table's compiled transforms and checks, which the run's `needed_for` (its
        transforms, its checks) cannot run without."""
        if self.spec.compiled is None:
            raise NotImplementedError(
                f"{self.where()}: {needed_for} were not compiled for this run"
            )
        return self.spec.compiled


class Audit(ABC):
    """A check on the written branch: the publish stage runs every audit of the batch after
    the write, before the publish commit; one that raises stops the run (nothing is
    published, the offsets do not move)."""

    @abstractmethod
    def run(self, context: StageContext, batch: Batch) -> None: ...


T = TypeVar("T")


@dataclass
class Outcome(Generic[T]):
    """A result a stage leaves for the run's results, set when it is known (by an audit,
    after the write, or by the stage itself)."""

    value: T | None = None


@dataclass(frozen=True)
class DecodeCounts:
    """What the decode stage's observation counts during the write's single pass: records
    read, bad records, tombstones (null values), duplicates the read tasks flagged, and
    the records, bad records and tombstones of each partition read (the run's
    accounting). `upsert`: tombstones go on to the write (deletes); on an append table
    the decode stage drops them."""

    observation: Observation
    partitions: tuple[int, ...]
    upsert: bool = False

    def figure(self, name: str) -> int:
        return int(observed_metrics(self.observation).get(name) or 0)

    @property
    def records_read(self) -> int:
        return self.figure("records")

    @property
    def bad_records(self) -> int:
        return self.figure("bad_records")

    @property
    def tombstones(self) -> int:
        return self.figure("tombstones")

    @property
    def read_task_duplicates(self) -> int:
        return self.figure("duplicates")

    def read_by_partition(self) -> dict[int, int]:
        return {p: self.figure(f"records_p{p}") for p in self.partitions}

    def bad_by_partition(self) -> dict[int, int]:
        return {p: self.figure(f"bad_p{p}") for p in self.partitions}

    def tombstones_by_partition(self) -> dict[int, int]:
        return {p: self.figure(f"tombstones_p{p}") for p in self.partitions}

    @property
    def rows_out(self) -> int:
        """Rows the decode stage passes on: good rows, and upsert tombstones."""
        rows = self.records_read - self.bad_records
        return rows if self.upsert else rows - self.tombstones


@dataclass(frozen=True)
class TransformCounting:
    """The transform stage's counts, read after the write: the chain's (Spark's steps' and
    the duplicates the read tasks dropped), and the rows left after the dedup against the
    table (`after`; None: none ran)."""

    decode: DecodeCounts
    result: TransformResult | None  # None: no step ran in Spark
    after: Observation | None
    on_error: str  # the table's: `skip` counts the rejected rows as skipped

    def counts(self) -> TransformCounts:
        """The chain's counts: Spark's steps' (if any ran) plus the duplicates the read
        tasks dropped; with no Spark step, the rows in are the decoded good rows."""
        in_tasks = self.decode.read_task_duplicates
        if self.result is None:
            decoded = self.decode.rows_out
            return TransformCounts(decoded, decoded - in_tasks, 0, in_tasks, 0)
        return self.result.counts().plus_read_task_duplicates(in_tasks)

    def rows_left(self) -> int:
        if self.after is None:
            return self.counts().rows_out
        return int(observed_metrics(self.after)["rows"])

    @property
    def skipped(self) -> int:
        return self.counts().rejected if self.on_error == "skip" else 0

    def report(self) -> dict[str, int]:
        """run_results.json `transforms`."""
        figures = self.counts().as_dict()
        figures["already_in_table"] = figures["rows_out"] - self.rows_left()
        return figures


@dataclass(frozen=True)
class CheckCounting:
    """The checks' report (run_results.json `checks`: known when they ran on the batch,
    set by their audit when they run on the written rows) and the rows they took out."""

    report: Outcome[dict[str, Any]] = field(default_factory=Outcome)
    skipped: int = 0
    dead_lettered: int = 0


@dataclass(frozen=True)
class RejectedRows:
    """Rows a transform or a row-level check took out of `good`, with where they go.

    `rows` is in REJECTED_ROW_SCHEMA (ingest/bad_records.py); `policy` is "skip" (counted
    only) or "dlq" (route_bad_records fetches their original bytes and dead-letters them).
    """

    policy: str
    rows: DataFrame


@dataclass(frozen=True)
class Batch:
    """The data flowing between stages: lazy DataFrames until the write stage runs.

    `good`: rows for the table (its columns + the hidden `__tf_*` columns).
    `bad`: records rejected so far, in BAD_RECORD_SCHEMA shape (None: none possible).
    `decode`, `transforms`, `checks`: what each stage counted (read after the write: Spark
    observations are filled by the write's single pass); `accounting`: the run's, set by
    route_bad_records' audit.
    `rejected`: rows taken out by transforms and row-level checks (route_bad_records
    handles them by their policy).
    `audits`: checks on the written branch that decide whether publish may happen.
    `snapshot_properties`: extra summary properties of the commit the write makes.
    `key_reports`: what the read tasks reported about keys, when the decode stage asked
    them (read by the audits, after the write).
    """

    good: DataFrame | None = None
    bad: DataFrame | None = None
    decode: DecodeCounts | None = None
    transforms: TransformCounting | None = None
    checks: CheckCounting | None = None
    accounting: Outcome[RunAccounting] = field(default_factory=Outcome)
    rejected: tuple[RejectedRows, ...] = ()
    audits: tuple[Audit, ...] = ()
    snapshot_properties: Mapping[str, str] = field(default_factory=dict)
    snapshot_id: int | None = None  # main's snapshot after the publish (None: unpublished)
    committed_at_ms: int | None = None  # that snapshot's commit time (Unix ms)
    key_reports: KeyReports | None = None

    def evolve(self, **changes: Any) -> Batch:
        return replace(self, **changes)

    @property
    def records_read(self) -> int:
        return self.decode.records_read if self.decode is not None else 0

    @property
    def bad_records(self) -> int:
        return self.decode.bad_records if self.decode is not None else 0

    @property
    def tombstones(self) -> int:
        return self.decode.tombstones if self.decode is not None else 0

    @property
    def rows_skipped(self) -> int:
        """Rows the transforms rejected under on_error skip, and skip checks' rows."""
        transforms = self.transforms.skipped if self.transforms is not None else 0
        return transforms + (self.checks.skipped if self.checks is not None else 0)

    @property
    def records_written(self) -> int:
        """Rows decoded (or left by the transforms), less those the checks took out; not
        tombstones (counted apart)."""
        if self.decode is None:
            return 0
        good = self.decode.rows_out
        if self.transforms is not None:
            good = self.transforms.rows_left()
        if self.checks is not None:
            good -= self.checks.skipped + self.checks.dead_lettered
        return good - (self.tombstones if self.decode.upsert else 0)
