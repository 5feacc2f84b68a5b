"""What a read task does with the keys of the rows it decodes, and what it reports.

Two users, both on append tables:

- the table's dedup, when it runs in the read tasks (`pipeline/transforms/read_task_dedup.py`):
  each task flags the rows it superseded, and reports a digest of each key it kept, so
  the run can tell whether two tasks kept one key;
- `unique` checks on columns the transforms pass through untouched
  (`pipeline/checks/read_task_unique.py`): each task reports a digest of each kept row's key;
  when no digest repeats across all tasks, every key of the rows written is distinct,
  and the check needs no shuffle, sort and window of the written rows.

The digests are `pipeline/transforms/arrow_dedup.py`'s: exact for one integer-like column; for
other keys two different keys may share a digest, which only ever makes a repeat
appear (the exact path then runs), never hides one.

The reports travel in a Spark accumulator, `{task's partition: TaskKeyReport}`: a task
run twice (a retry, a later job over the same frame) replaces its own entry. The driver
reads them once, after the write (`KeyReports`), and holds 8 bytes per kept key and
per row of each `unique` key until then.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

from tableflow_core.ingest.columns import good_row_mask
from tableflow_core.pipeline.transforms.arrow_dedup import (
    Digests,
    TaskDedup,
    distinct,
    flag_duplicates,
    keys_in_several_tasks,
    row_digests,
)


@dataclass(frozen=True)
class TaskKeys:
    """The dedup a read task runs or reports for (None: none), and the columns of each
    `unique` check whose keys it reports."""

    dedup: TaskDedup | None = None
    unique: tuple[tuple[str, ...], ...] = ()

    def __bool__(self) -> bool:
        return self.dedup is not None or bool(self.unique)

    @property
    def flags(self) -> bool:
        """The task adds the `__tf_duplicate` column (it runs the dedup)."""
        return self.dedup is not None and self.dedup.flags


@dataclass(frozen=True)
class TaskKeyReport:
    """One task's report: the distinct digests of the dedup keys it kept (None: no
    dedup), and for each `unique` key a digest per kept row whose key is not all NULL."""

    dedup: Digests | None
    unique: tuple[Digests, ...]


class TaskKeysRun:
    """One read task's pass over its decoded batches (`batches`), then its `report()`."""

    def __init__(self, keys: TaskKeys, schema: pa.Schema, chunk_rows: int) -> None:
        self._keys = keys
        self._schema = schema
        self._chunk_rows = chunk_rows
        self._dedup: list[Digests] = []
        self._unique: list[list[Digests]] = [[] for _ in keys.unique]

    def batches(self, decoded: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The task's output. Running the dedup reads every batch first (a row loses only
        once the task has read its key's last row); otherwise the batches pass as they
        come, their keys digested on the way."""
        dedup = self._keys.dedup
        if dedup is not None and dedup.flags:
            flagged, kept, digests = flag_duplicates(decoded, dedup, self._schema, self._chunk_rows)
            self._dedup.append(digests)
            self._digest_unique(kept)
            yield from flagged
            return
        for batch in decoded:
            good = batch.filter(good_row_mask(batch))
            if good.num_rows:
                self._digest(pa.Table.from_batches([good]))
            yield batch

    def _digest(self, rows: pa.Table) -> None:
        if self._keys.dedup is not None:
            self._dedup.append(row_digests(rows, self._keys.dedup.keys))  # `report` dedups them
        self._digest_unique(rows)

    def _digest_unique(self, rows: pa.Table) -> None:
        for parts, columns in zip(self._unique, self._keys.unique, strict=True):
            parts.append(row_digests(rows, columns, skip_all_null=True))

    def report(self) -> TaskKeyReport:
        dedup = None
        if self._keys.dedup is not None:
            dedup = distinct(_joined(self._dedup))
        return TaskKeyReport(dedup, tuple(_joined(parts) for parts in self._unique))


def _joined(parts: Sequence[Digests]) -> Digests:
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)


class KeyReportParam(AccumulatorParam[dict[int, TaskKeyReport]]):
    """`{task's partition: its report}`: a task run twice replaces its own entry."""

    def zero(self, value: dict[int, TaskKeyReport]) -> dict[int, TaskKeyReport]:
        return {}

    def addInPlace(
        self, value1: dict[int, TaskKeyReport], value2: dict[int, TaskKeyReport]
    ) -> dict[int, TaskKeyReport]:
        value1.update(value2)
        return value1


class KeyReports:
    """The run's task reports, read from the accumulator once, after the write (which
    ran every read task). `tasks`: how many read tasks the run has; with fewer reports,
    nothing is proven (the dedup is redone, the checks take their exact path)."""

    def __init__(self, accumulator: Any, tasks: int, keys: TaskKeys) -> None:
        self.accumulator = accumulator
        self.tasks = tasks
        self.keys = keys
        self._read: dict[int, TaskKeyReport] | None = None

    def _reports(self) -> dict[int, TaskKeyReport] | None:
        if self._read is None:
            self._read = dict(self.accumulator.value)
            self.release()
        return self._read if len(self._read) >= self.tasks else None

    def release(self) -> None:
        """Empty the accumulator: the driver keeps every accumulator for good, and a
        later job over the decoded frame (bad records read again) would fill it again."""
        self.accumulator.value = {}

    def dedup_keys_across_tasks(self) -> int | None:
        """Dedup keys kept by more than one task (None: not every task reported)."""
        reports = self._reports()
        if reports is None:
            return None
        return keys_in_several_tasks(
            {task: r.dedup for task, r in reports.items() if r.dedup is not None}
        )

    def distinct(self) -> frozenset[tuple[str, ...]]:
        """The `unique` keys no two kept rows of the run share (their digests all differ)."""
        reports = self._reports()
        if reports is None:
            return frozenset()
        proven = set()
        for index, columns in enumerate(self.keys.unique):
            merged = _joined([r.unique[index] for r in reports.values()])
            if distinct(merged).size == merged.size:
                proven.add(columns)
        return frozenset(proven)
