"""Which tables of a `tableflow run` refresh together: its lanes (pure).

A lane is a thread of `run` with its own schedule over its tables: a table waits only for
the other tables of its lane, never for a slower table of another lane nor for a
maintenance run (maintenance has a lane of its own, `tasks/run.py`).

- **The shared lane**: every table whose refresh can join the shared Spark job (a plain
  append, a driver-merged upsert, an append table with row-local checks and an Iceberg
  dead-letter table: `ingest/sharing.py`). Their runs are one Spark job
  per cycle: splitting them over lanes would run that job's fixed cost once per lane.
- **A lane of its own** for each table whose refresh runs a pipeline of its own (checks
  or transforms on Spark, a dead-letter target, publish_to catalogs, a Delta mirror,
  partitioned or sorted writes): each costs several Spark jobs and commits, seconds at
  the least, which every table of its cycle waited for when one cycle ran every table.
  Past `MAX_OWN_LANES` such tables, they share those lanes round robin (every lane is
  a thread and a Spark job in flight at once).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tableflow_core.checks.arrow_checks import READ_TASK_KINDS
from tableflow_core.config.models.dead_letter import IcebergDeadLetter
from tableflow_core.config.project import Table

SHARED_LANE = "shared"
# Lanes of tables with their own pipeline at most; more such tables share them.
MAX_OWN_LANES = 8


@dataclass(frozen=True)
class Lane:
    name: str
    tables: tuple[str, ...]


def own_pipeline(table: Table) -> str | None:
    """Why the table's refresh runs a Spark pipeline of its own (None: it can join the
    shared job). Read from the config alone, as `ingest/sharing.py` decides per run
    from the plan (a backfill of a plain table still gets a job of its own, in its lane)."""
    reasons = (
        ("checks", bool(table.checks) and not _checks_in_read_tasks(table)),
        ("transforms", bool(table.transforms)),
        ("a dead-letter target", _dead_letters_on_spark(table)),
        ("publish_to catalogs", bool(table.publish_to)),
        ("a Delta mirror", "delta" in table.formats),
        ("a partitioned or sorted layout", bool(table.partition_by or table.sort_by)),
    )
    return next((reason for reason, applies in reasons if applies), None)


def _checks_in_read_tasks(table: Table) -> bool:
    """The table's checks are of the kinds a shared job's read tasks judge (their column
    types are known only to the plan: a type they do not compare runs the table's job
    of its own in this lane's cycle, as a backfill does)."""
    return table.mode == "append" and all(c.type in READ_TASK_KINDS for c in table.checks)


def _dead_letters_on_spark(table: Table) -> bool:
    """Bad records or checks' rows go to a dead-letter target the shared job does not
    write: all but an append table's Iceberg table with raw payloads."""
    routes = table.on_error == "dlq" or any(c.on_failure == "dlq" for c in table.checks)
    if not routes:
        return False
    return not (
        table.mode == "append"
        and isinstance(table.dlq, IcebergDeadLetter)
        and table.dlq.payload != "masked"
        and not table.transforms
    )


def assign_lanes(tables: Iterable[Table], max_own_lanes: int = MAX_OWN_LANES) -> tuple[Lane, ...]:
    """The shared lane (if any table joins it) first, then the tables with pipelines of
    their own, one lane each up to `max_own_lanes` (then round robin), in name order."""
    ordered = sorted(tables, key=lambda t: t.name)
    shared = tuple(t.name for t in ordered if own_pipeline(t) is None)
    own = [t.name for t in ordered if own_pipeline(t) is not None]
    count = min(len(own), max(1, max_own_lanes))
    groups: list[list[str]] = [[] for _ in range(count)]
    for index, name in enumerate(own):
        groups[index % count].append(name)
    lanes = [Lane(SHARED_LANE, shared)] if shared else []
    lanes += [Lane(f"own:{'+'.join(group)}", tuple(group)) for group in groups]
    return tuple(lanes)
