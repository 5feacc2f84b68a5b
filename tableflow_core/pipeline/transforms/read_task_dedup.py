"""When an append table's dedup runs inside the read tasks instead of a Spark shuffle.

Spark's exact dedup (`pipeline.transforms.spark._run_dedup`) shuffles and sorts the whole batch
by key and ranks it in a window: on 1M rows, ~1.4 s of a 6-7 s table run, even when no
key repeats. Most repeats a dedup removes are a producer's retries and replays of the
same record: same key, same Kafka partition, close offsets. So a decode task can
deduplicate what it read (`pipeline/transforms/arrow_dedup.py`), and the batch is exact as long
as no key was kept by two tasks. Every task reports digests of the keys it kept; after
the write, before publish, an audit looks for a digest reported by two tasks:

- none: the batch written is exactly what the shuffle would have written;
- some: the run's branch is dropped and the run starts again with the shuffle
  (`KeysAcrossReadTasks`, caught by `engine.ingest`): the records are read from Kafka
  again, nothing is published twice.

The run's outcome goes in the publish commit's summary (`KEYS_ACROSS_TASKS_PROPERTY`),
and the next run of the table chooses by it: a table whose last run had keys across
tasks (duplicates spread over partitions, or a partition split over several tasks) goes
to the shuffle at once, so it pays the second read once, not every run. The shuffle path
still reports its tasks' keys (digests of the rows it reads: ~0.02 s of CPU per 1M
integer keys), so a table goes back to the read tasks once a run of two or more tasks
sees no key across tasks (a run of one task records nothing: it cannot see one).

Where it applies (else the shuffle runs, as before):
- append tables (an upsert's MERGE dedups by key already);
- the chain Spark would run starts with the dedup (masks before it ran while decoding),
  so the rows it compares are the decoded rows;
- every key column is a whole number, boolean, date, time or timestamp (not in
  nanoseconds), text, binary or decimal (`transforms/key_types.py`);
- a run of at most `placement.MAX_RECORDS` records: the driver holds 8 bytes per kept key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tableflow_core.ingest.placement import (
    read_task_dedup_step,
    read_tasks_work_on_keys,
    spark_chain,
)
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.pipeline.transforms.arrow_dedup import TaskDedup, TaskDedupMode
from tableflow_core.transforms.compile import CompiledTransforms

if TYPE_CHECKING:
    from tableflow_core.ingest.spec import IngestSpec

# Publish commit summary: how many keys two read tasks both kept in the run ("0": the
# read tasks' dedup was exact, or would have been).
KEYS_ACROSS_TASKS_PROPERTY = "tableflow.dedup.keys-across-read-tasks"
# Where the run's dedup ran: "read tasks" or "shuffle".
DEDUP_RAN_IN_PROPERTY = "tableflow.dedup.ran-in"
RAN_IN_READ_TASKS = "read tasks"
RAN_IN_SHUFFLE = "shuffle"


def read_tasks_report_keys(spec: IngestSpec, ranges: Sequence[OffsetRange]) -> bool:
    """Whether the run's read tasks may work on keys at all (the dedup here, `unique`
    checks in `pipeline/checks/read_task_unique.py`): an append table with transforms or checks,
    and a run of at most MAX_RECORDS records."""
    records = sum(r.end - r.start for r in ranges)
    return read_tasks_work_on_keys(spec.mode, spec.compiled is not None, records)


def task_dedup(
    spec: IngestSpec, ranges: Sequence[OffsetRange], in_read_tasks: bool
) -> TaskDedup | None:
    """What the run's read tasks do for the table's dedup, or None: the dedup (if any)
    runs in Spark without reports. `in_read_tasks`: the engine allows the read tasks to
    dedup this run (`allowed_by_last_run`, not after a fallback)."""
    if not read_tasks_report_keys(spec, ranges):
        return None
    step = read_task_dedup_step(spec_chain(spec))
    if step is None:
        return None
    mode: TaskDedupMode = "dedup" if in_read_tasks else "report"
    return TaskDedup(keys=step.keys, keep=step.keep, mode=mode)


def allowed_by_last_run(keys_across_tasks: str | None) -> bool:
    """False when the table's last run that reported its keys (`KEYS_ACROSS_TASKS_PROPERTY`
    of main's newest snapshot that has it) saw keys kept by two read tasks."""
    try:
        return keys_across_tasks is None or int(keys_across_tasks) == 0
    except ValueError:
        return True


def run_summary(dedup: TaskDedup, keys_across_tasks: int, tasks: int) -> dict[str, str]:
    """The summary properties of a run whose `tasks` read tasks reported their keys. A
    run of one task cannot see a key across tasks, so it records no count: the next run
    still chooses by the last run that could (a small run between two large ones would
    otherwise send the next large one back to the read tasks, to be redone)."""
    ran_in = RAN_IN_READ_TASKS if dedup.flags else RAN_IN_SHUFFLE
    summary = {DEDUP_RAN_IN_PROPERTY: ran_in}
    if tasks > 1:
        summary[KEYS_ACROSS_TASKS_PROPERTY] = str(keys_across_tasks)
    return summary


def describe_fallback(table: str, keys_across_tasks: int) -> str:
    return (
        f"table {table}: {keys_across_tasks} dedup key(s) were kept by more than one read "
        "task; the run was written again with Spark's shuffle dedup (its next runs too, "
        "until a run sees no key across read tasks)"
    )


def spec_chain(spec: IngestSpec) -> CompiledTransforms:
    """The chain of `spec` Spark runs (without the masks that ran while decoding)."""
    assert spec.compiled is not None
    return spark_chain(spec.compiled.transforms, spec.key_columns)
