"""What a stage runner receives (a context) and passes on (a batch)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.sql_text import quote_ident

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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
    # Whether the read tasks may run the table's dedup (pipeline/transforms/read_task_dedup.py): not
    # after a run whose read tasks kept a key twice, nor when that run is being redone.
    dedup_in_read_tasks: bool = True

    @property
    def branch_identifier(self) -> str:

        return f"{self.spec.identifier}.{quote_ident('branch_' + self.branch)}"

    def where(self) -> str:
        return f"table {self.spec.table_name} ({self.spec.identifier}), topic {self.spec.topic!r}"


# An audit runs after the write, on the branch, before publish; it raises to stop the run.
Audit = Callable[["StageContext", "Batch"], None]


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
    `counters`: figures for the run results; values may be callables evaluated after
    the write (Spark observations are filled by the write's single pass).
    `rejected`: rows taken out by transforms and row-level checks (route_bad_records
    handles them by their policy).
    `audits`: checks on the written branch that decide whether publish may happen.
    `snapshot_properties`: extra summary properties of the commit the write makes.
    `results`: per-stage reports for run_results.json (values may be callables, as counters).
    """

    good: DataFrame | None = None
    bad: DataFrame | None = None
    counters: Mapping[str, Any] = field(default_factory=dict)
    rejected: tuple[RejectedRows, ...] = ()
    audits: Sequence[Audit] = ()
    snapshot_properties: Mapping[str, str] = field(default_factory=dict)
    results: Mapping[str, Any] = field(default_factory=dict)
    snapshot_id: int | None = None  # set by publish
    # What the read tasks reported about keys (pipeline/task_keys.KeyReports), when the
    # decode stage asked them: read by the audits, after the write.
    key_reports: Any = None

    def evolve(self, **changes: Any) -> Batch:
        return replace(self, **changes)

    def counter(self, name: str, default: int = 0) -> int:
        value = self.counters.get(name, default)
        return int(value() if callable(value) else value)
