"""Which tables `tableflow run` maintains beside their ingest, without the table's lock.

Held for the whole of a maintenance run, the table's lock stopped the table's refreshes
for as long as its compaction took: in the accelerated soak (one append table, a commit
every ~0.4 s, compaction due every 10 commits) maintenance held it about half of the
time, and freshness p95 went from 1.5 s to 19-35 s (benchmarks/soak.py, docs/production.md).

An append table's maintenance commits only `replace` snapshots (compaction, manifest
rewrites) or none (expiry), which change no row and no committed offset. Iceberg commits
each on top of whatever ingest committed meanwhile, and an ingest refused because one
of them moved `main` is published on top of it (`engine/run_branch.rebase_point`; a
table with a pipeline of its own runs its batch again). Nothing is lost and nothing
waits.

An append table's Iceberg dead-letter table is maintained in the same run (compaction,
manifest rewrites, expiry: `replace` snapshots too), and its writers retry on a
conflict: the driver's append reloads the table, looks up which of its rows it already
holds and appends the rest (`deadletter/sinks/iceberg_driver_append.py`), Spark's MERGE
is retried the same way (`deadletter/sinks/iceberg_table.py`). A dead-letter table shared
by several tables was always written by the others while one of them held its lock.
Holding the table's lock over it stopped a checked table's refreshes at each of its
compactions: in the 10-table soak such a table skipped a cycle at every compaction
(commit interval p95 1.8-2.1 s against 1.5 s for a plain append table).

The lock stays for the rest: an upsert table (its batch's position deletes name the data
files a compaction replaces), and a table whose maintenance publishes metadata elsewhere
(`publish_to`: a later publish must not go back to an older file) or syncs a Delta log.
"""

from __future__ import annotations

from tableflow_core.config.project import Table


def maintained_beside_ingest(table: Table) -> bool:
    """`table`'s maintenance runs without its lock in `tableflow run` (module docstring)."""
    return table.mode == "append" and not table.publish_to and "delta" not in table.formats
