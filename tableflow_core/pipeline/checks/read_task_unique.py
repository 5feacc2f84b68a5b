"""Which `unique` checks the read tasks can prove, so that they need no window.

A `unique` check judges the rows written: it flags every row whose key (not all NULL)
another row shares. Spark finds those with a window over the key: a shuffle, a sort and
a count per row of the written batch (1M rows: ~0.5 s of a ~1.8 s check stage). When
the key's columns come from the topic untouched by the transforms (no mask, derive,
rename or drop names them: filters and dedups only take rows out), the rows written are
a subset of the rows the read tasks decoded, with the same keys. So if no two decoded
rows share a key, no two written rows do: each read task reports a digest of every
row's key (`pipeline/task_keys.py`), and when no digest repeats across the run the
check's flag is 0 for every row, without the window. A repeated digest (a repeated key,
or two keys sharing a digest) proves nothing: the window runs as before and finds the
exact failing rows.

Only where the checks judge the rows the write appended to an append table (no check
takes rows out: `pipeline/runners/check.py`), the reports being complete once the write
ran; for keys of the types the digests handle (`transforms/key_types.py`); and
for runs of at most `placement.MAX_RECORDS` records (the driver holds 8 bytes per
row of each such key until the check).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tableflow_core.ingest.placement import unique_keys_reported
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.pipeline.transforms.read_task_dedup import read_tasks_report_keys

if TYPE_CHECKING:
    from tableflow_core.ingest.spec import IngestSpec


def unique_keys_in_read_tasks(
    spec: IngestSpec, ranges: Sequence[OffsetRange]
) -> tuple[tuple[str, ...], ...]:
    """The columns of each `unique` check of `spec` the read tasks report keys for."""
    if not read_tasks_report_keys(spec, ranges) or spec.compiled is None:
        return ()
    return unique_keys_reported(spec.compiled.transforms, spec.compiled.checks)
