"""`on_error: skip | dlq` and rejected rows: routing through the dead-letter library,
then the run's accounting, all on the written branch before publish.

`route_and_account` adds an observation on the rows going to the write (written rows and
tombstones per partition, counted by the write's single pass) and one audit that runs
after the write, before publish:

1. decode failures (`batch.bad`), evaluated only when the decode observation counted
   some, go to `deadletter.sinks.route_bad_records` by the table's policy; rows a
   transform or check rejected (`batch.rejected`) go by their own policy (a `dlq` one
   has its original bytes fetched from Kafka first);
2. `RunAccounting.from_counts(...).check()` refuses to publish when a partition does not
   balance;
3. the accounting goes in the summary of the snapshot the publish commits (with the
   offsets), so data, offsets and accounting become visible together.

The dead-letter writes happen before publish: a crash in between re-runs the same
offsets, and the Iceberg sink adds no duplicates (its driver append skips the keys the
table holds, its MERGE matches them; a Kafka sink sends again). Their seconds are
`timings.dead_letter` in run_results.json (reading the records, counting them, writing),
of which `timings.dead_letter_write` the Iceberg table's write.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tableflow_core.deadletter.accounting import RunAccounting
from tableflow_core.deadletter.originals import fetch_originals, without_payload
from tableflow_core.deadletter.sinks import (
    POLICY_SINKS,
    SinkContext,
    SinkResult,
    counts_by_outcome,
    route_bad_records,
)
from tableflow_core.engine.observations import observe_counts, observed_metrics
from tableflow_core.engine.test_hooks import crash_point
from tableflow_core.ingest.bad_records import SOURCE_PARTITION_COLUMN
from tableflow_core.ingest.columns import RETRACTION_COLUMN, TOMBSTONE_COLUMN
from tableflow_core.ingest.stages import RouteBadRecords
from tableflow_core.pipeline.batch import Audit, Batch, Outcome, RejectedRows, StageContext
from tableflow_core.pipeline.data_files import file_io_properties, write_data_files
from tableflow_core.pipeline.vended_credentials import refresh_table_io
from tableflow_core.sql_text import quote_ident

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, Observation


@dataclass(frozen=True)
class CatalogTables:
    """The run's catalog through pyiceberg, for the Iceberg dead-letter sink's driver
    append (deadletter/sinks/base.IcebergTables): tables loaded with current credentials,
    data files written as the main tables' small batches are."""

    catalog: Any  # pyiceberg Catalog

    def load(self, identifier: str) -> Any:
        table = self.catalog.load_table(identifier)
        refresh_table_io(table)
        return table

    def write_data_files(self, table: Any, rows: pa.Table) -> list[Any]:
        return write_data_files(table.metadata, file_io_properties(table.io.properties), rows)


def sink_context(context: StageContext) -> SinkContext:
    handle = context.catalog
    catalog = getattr(handle, "catalog", None)
    return SinkContext(
        table=context.spec.table_name,
        run_id=context.run_id,
        kafka_conf=dict(context.kafka_conf),
        spark_catalog=context.spec.catalog,
        catalog_address=str(getattr(handle, "address", "") or ""),
        iceberg_tables=CatalogTables(catalog) if catalog is not None else None,
    )


def _filtered(
    read: Mapping[int, int],
    bad: Mapping[int, int],
    written: Mapping[int, int],
    tombstones: Mapping[int, int],
    rejected: list[SinkResult],
) -> dict[int, int]:
    """Rows taken out of the batch on purpose (transform filters and dedup): the decoded
    good rows that neither reached the write nor were routed as rejected (skip and dlq).

    Measured apart from the sinks' own counts (two observations: after decode, before the
    write), so a negative figure (a row counted twice) fails the accounting's check.
    """
    routed = counts_by_outcome(rejected)
    return {
        p: read.get(p, 0)
        - bad.get(p, 0)
        - written.get(p, 0)
        - tombstones.get(p, 0)
        - routed["skipped"].get(p, 0)
        - routed["dead_lettered"].get(p, 0)
        for p in read
    }


@dataclass(frozen=True)
class WrittenCounts:
    """Rows going to the write, and tombstones (upsert), per partition read: counted by an
    observation during the write's pass (None: no ranges, nothing is written)."""

    observation: Observation | None
    partitions: tuple[int, ...]

    def per_partition(self, name: str) -> dict[int, int]:
        if self.observation is None:
            return {}
        counted = observed_metrics(self.observation)
        return {p: int(counted.get(f"{name}_p{p}") or 0) for p in self.partitions}


def _observe_written(context: StageContext, good: DataFrame) -> tuple[DataFrame, WrittenCounts]:
    partitions = tuple(sorted({r.partition for r in context.ranges}))
    upsert = TOMBSTONE_COLUMN in good.columns
    source_partition = quote_ident(SOURCE_PARTITION_COLUMN)
    tombstone = quote_ident(TOMBSTONE_COLUMN)
    # A filter's retraction (upsert) deletes like a tombstone but is counted as filtered.
    record_tombstone = tombstone
    if RETRACTION_COLUMN in good.columns:
        record_tombstone = f"{tombstone} AND NOT {quote_ident(RETRACTION_COLUMN)}"
    counts: dict[str, str] = {}
    for p in partitions:
        in_p = f"{source_partition} = {p}"
        written = f"{in_p} AND NOT {tombstone}" if upsert else in_p
        counts[f"written_p{p}"] = f"count(CASE WHEN {written} THEN 1 END)"
        if upsert:
            counts[f"tombstones_p{p}"] = (
                f"count(CASE WHEN {in_p} AND {record_tombstone} THEN 1 END)"
            )
    if not counts:  # no ranges: nothing was read, nothing is written
        return good, WrittenCounts(None, ())
    observed, observation = observe_counts(good, "written", counts)
    return observed, WrittenCounts(observation, partitions)


def _route_rejected(
    context: StageContext, rejected: RejectedRows, sinks: SinkContext
) -> SinkResult:
    if rejected.policy == "dlq":
        originals = fetch_originals(
            context.spark,
            rejected.rows,
            context.spec.topic,
            dict(context.kafka_conf),
            context.run_id,
            payload=context.spec.dead_letter_payload,
        )
        return route_bad_records(originals, "dlq", context.spec.dead_letter, sinks)
    return POLICY_SINKS["skip"](sinks).write(rejected.rows)


def _dead_letter_rows(context: StageContext, bad: DataFrame) -> DataFrame:
    """Decode failures as the table's dead-letter target keeps them: as read, or (payload
    `masked`) without key and value bytes, which hold the clear values of masked columns
    and cannot be masked undecoded."""
    if context.spec.dead_letter_payload != "masked":
        return bad
    return without_payload(bad)


@dataclass(frozen=True)
class RouteAndAccount(Audit):
    """After the write, before publish: route bad records (decode failures under `skip` /
    `dlq` when `route_decode`, and the rows transforms and checks rejected, by their own
    policy), then check the run's accounting and record it for the publish commit."""

    spec: RouteBadRecords
    route_decode: bool
    written: WrittenCounts
    accounting: Outcome[RunAccounting]

    def run(self, context: StageContext, batch: Batch) -> None:
        assert batch.decode is not None, "route_bad_records needs the decode stage before it"
        sinks = sink_context(context)
        started = time.perf_counter()
        results: list[SinkResult] = []
        if self.route_decode and batch.bad is not None and batch.bad_records:
            rows = _dead_letter_rows(context, batch.bad)
            results.append(
                route_bad_records(rows, self.spec.on_error, context.spec.dead_letter, sinks)
            )
        rejected = [_route_rejected(context, r, sinks) for r in batch.rejected]
        context.timings["dead_letter"] = time.perf_counter() - started
        context.timings["dead_letter_write"] = sum(r.write_s for r in (*results, *rejected))
        written = self.written.per_partition("written")
        if batch.decode.upsert:  # deletes: counted where they reach the write
            tombstones = self.written.per_partition("tombstones")
        else:  # dropped by the decode stage, and said so
            tombstones = batch.decode.tombstones_by_partition()
            _warn_null_values(context, tombstones)
        read = batch.decode.read_by_partition()
        bad = batch.decode.bad_by_partition()
        accounting = RunAccounting.from_counts(
            context.spec.table_name,
            context.spec.topic,
            context.run_id,
            read=read,
            written=written,
            tombstones=tombstones,
            filtered=_filtered(read, bad, written, tombstones, rejected),
            **counts_by_outcome([*results, *rejected]),
        ).check()
        self.accounting.value = accounting
        crash_point("after_dead_letter")
        _record_accounting(context, accounting)


def route_and_account(
    context: StageContext, spec: RouteBadRecords, batch: Batch, *, route_decode: bool
) -> Batch:
    """Observe what is written; after the write, route bad records and account for all.

    `route_decode`: decode failures go by `spec.on_error` here (skip / dlq); under `fail`
    the fail audit has already stopped the run when there were any.
    """
    assert batch.good is not None, "route_bad_records needs the decode stage before it"
    good, written = _observe_written(context, batch.good)
    audit = RouteAndAccount(spec, route_decode, written, batch.accounting)
    return batch.evolve(good=good, audits=(*batch.audits, audit))


def _warn_null_values(context: StageContext, tombstones: Mapping[int, int]) -> None:
    """Null values on an append table are tombstones: counted, not written (an append
    table has no row to delete). The run says so, per partition."""
    warning = null_values_warning(context.spec.topic, tombstones)
    if warning:
        context.warnings.append(warning)


def null_values_warning(topic: str, tombstones: Mapping[int, int]) -> str | None:
    """The warning of an append table's run that read null values (None: it read none)."""
    counted = {p: n for p, n in sorted(tombstones.items()) if n}
    if not counted:
        return None
    where = ", ".join(f"partition {p}: {n}" for p, n in counted.items())
    return (
        f"topic {topic!r}: {sum(counted.values())} null-value record(s) "
        f"(tombstones) not written ({where}): an append table keeps no deletes; they "
        "are counted as tombstones (mode: upsert applies them as deletes)"
    )


def _record_accounting(context: StageContext, accounting: RunAccounting) -> None:
    """The accounting goes in the summary of the publish commit's snapshot, beside the
    offsets and what the stages reported: the head of `main` after publish holds them all."""
    context.publish_properties.update(accounting.snapshot_summary())
