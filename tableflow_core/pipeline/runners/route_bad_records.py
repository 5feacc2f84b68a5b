"""route_bad_records: what happens to bad records, by the table's `on_error`.

Policies are found in `POLICIES` by name. `fail` (built in) adds an audit: after the
write, if the decode observation counted bad records, the run stops before publish with
an error naming the table, topic, partitions and offsets. `skip` and `dlq` plug in here
(the dead-letter issue): a policy receives the batch and may add audits or sinks; a DLQ
sink is a function taking a DataFrame in BAD_RECORD_SCHEMA. `skip` and `dlq` live in
`dead_letter.py` (routing by the dead-letter library, then the run's accounting); under
`fail`, rows rejected by checks with their own policy go there too, and every run, under
any policy, gets its accounting.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from tableflow_core.errors import FailedRecord, IngestError
from tableflow_core.ingest.stages import RouteBadRecords
from tableflow_core.pipeline.batch import Audit, Batch, StageContext
from tableflow_core.pipeline.registry import stage_runner
from tableflow_core.pipeline.runners.dead_letter import route_and_account

MAX_REPORTED_FAILURES = 20

Policy = Callable[[StageContext, RouteBadRecords, Batch], Batch]
POLICIES: dict[str, Policy] = {}


def failed_records(batch: Batch, limit: int = MAX_REPORTED_FAILURES) -> list[FailedRecord]:
    """The first bad records by (partition, offset); reads their ranges again."""
    if batch.bad is None:
        return []
    rows = (
        batch.bad.select("source_topic", "source_partition", "source_offset", "error_message")
        .orderBy("source_partition", "source_offset")
        .limit(limit)
        .collect()
    )
    return [FailedRecord(r[0], int(r[1]), int(r[2]), str(r[3])) for r in rows]


class FailOnBadRecords(Audit):
    """`on_error: fail`: records that could not be decoded stop the run before publish,
    naming the first of them (lowest partition and offset)."""

    def run(self, context: StageContext, batch: Batch) -> None:
        count = batch.bad_records
        if not count:
            return
        failures = failed_records(batch)
        listed = "; ".join(f.describe() for f in failures)
        more = f" (first {len(failures)} listed)" if count > len(failures) else ""
        raise IngestError(
            f"table {context.spec.table_name} ({context.spec.identifier}): {count} record(s) "
            f"could not be decoded, nothing was committed{more}: {listed}",
            failures,
            run_id=context.run_id,
        )


def fail(context: StageContext, spec: RouteBadRecords, batch: Batch) -> Batch:
    # First of the audits: a record that could not be decoded is the first thing wrong
    # with it (the error and a suspension name it, not a later stage's complaint).
    batch = batch.evolve(audits=(FailOnBadRecords(), *batch.audits))
    # Every run gets its accounting, also when nothing can be rejected: read = written
    # (+ filtered + tombstones) is what users check first.
    return route_and_account(context, spec, batch, route_decode=False)


POLICIES["fail"] = fail
POLICIES["skip"] = partial(route_and_account, route_decode=True)
POLICIES["dlq"] = partial(route_and_account, route_decode=True)


@stage_runner(RouteBadRecords)
def route_bad_records(context: StageContext, spec: RouteBadRecords, batch: Batch) -> Batch:
    policy = POLICIES.get(spec.on_error)
    if policy is None:
        raise NotImplementedError(
            f"{context.where()}: on_error {spec.on_error} is not supported yet"
        )
    return policy(context, spec, batch)
