"""Planning which offset ranges a run reads (pure logic, no I/O).

A run reads, per partition, the half-open range [committed, end), where the end is the
partition's last stable offset (`kafka.admin.get_watermarks`). Large ranges are split so
that every Spark task does a bounded amount of work, and a run can be capped; ranges
always start at the committed offset so a capped run never skips anything: the next run
continues where this one stopped.

A partition added to the topic after the table first read it is read from its start
(offset 0). Records below a partition's log start that the table was due to read are
gone (retention, `delete_records`): they are reported as the plan's `gaps`, never skipped
silently (the plan shows them; `on_data_loss` decides whether apply fails). Compaction
never moves the log start, so a compacted topic's gaps are not losses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

StartFrom = Literal["earliest", "latest"] | int  # int = timestamp in ms


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end) of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def lost_offsets_text(topic: str, partition: int, start: int, end: int) -> str:
    """How offsets [start, end) of a partition, gone before the table read them, are told."""
    return (
        f"topic {topic!r} partition {partition}: offsets {start}..{end - 1} "
        f"({end - start:,} records) were deleted from the topic before this table read them"
    )


@dataclass(frozen=True)
class OffsetPlan:
    ranges: tuple[OffsetRange, ...]
    start_offsets: dict[int, int]  # partition -> first offset this run reads (after gaps)
    # Offsets [committed, log start) the table was due to read that are gone from the
    # broker (deleted by retention or `delete_records` before it read them).
    gaps: tuple[OffsetRange, ...]

    @property
    def total_records(self) -> int:
        return sum(r.size for r in self.ranges)


def initial_offsets(
    watermarks: Mapping[int, tuple[int, int]],
    start_from: StartFrom,
    offsets_for_time: Mapping[int, int] | None = None,
) -> dict[int, int]:
    """Where partitions start when the table has never committed offsets.

    `offsets_for_time` are the broker's answers to offsets_for_times for a timestamp
    start (partition -> first offset at or after it; -1 or missing = none, use high).
    """
    starts: dict[int, int] = {}
    for partition, (low, high) in watermarks.items():
        if start_from == "earliest":
            starts[partition] = low
        elif start_from == "latest":
            starts[partition] = high
        else:
            found = (offsets_for_time or {}).get(partition, -1)
            starts[partition] = high if found < 0 else max(found, low)
    return starts


def _fair_shares(backlog: Mapping[int, int], budget: int) -> dict[int, int]:
    """Split `budget` records across partitions: equal shares, leftovers redistributed."""
    shares = {p: 0 for p in backlog}
    remaining = dict(backlog)
    while budget > 0 and any(remaining.values()):
        hungry = sorted(p for p, left in remaining.items() if left > 0)
        each = max(1, budget // len(hungry))
        for partition in hungry:
            take = min(each, remaining[partition], budget)
            shares[partition] += take
            remaining[partition] -= take
            budget -= take
            if budget == 0:
                break
    return shares


def plan_offsets(
    topic: str,
    committed: Mapping[int, int],
    watermarks: Mapping[int, tuple[int, int]],
    start_from: StartFrom = "earliest",
    max_records_per_run: int | None = None,
    max_records_per_task: int = 250_000,
    offsets_for_time: Mapping[int, int] | None = None,
) -> OffsetPlan:
    """The full plan: ranges, where each partition starts, and retention gaps.

    `committed` holds the next offset to read per partition (from the table). A table
    that never read starts every partition at `start_from`; a partition missing from a
    table that has read (added to the topic since) starts at its beginning, offset 0.
    """
    if max_records_per_task <= 0:
        raise ValueError("max_records_per_task must be positive")
    fresh = (
        {partition: 0 for partition in watermarks}
        if committed
        else initial_offsets(watermarks, start_from, offsets_for_time)
    )
    starts: dict[int, int] = {}
    gaps: list[OffsetRange] = []
    for partition, (low, _high) in sorted(watermarks.items()):
        start = committed.get(partition, fresh[partition])
        if start < low:
            gaps.append(OffsetRange(topic, partition, start, low))
            start = low
        starts[partition] = start
    backlog = {p: max(0, watermarks[p][1] - starts[p]) for p in starts}
    if max_records_per_run is not None:
        backlog = _fair_shares(backlog, max_records_per_run)
    ranges: list[OffsetRange] = []
    for partition in sorted(backlog):
        position, stop = starts[partition], starts[partition] + backlog[partition]
        while position < stop:
            end = min(position + max_records_per_task, stop)
            ranges.append(OffsetRange(topic, partition, position, end))
            position = end
    return OffsetPlan(tuple(ranges), starts, tuple(gaps))


def plan_offset_ranges(
    committed: Mapping[int, int],
    watermarks: Mapping[int, tuple[int, int]],
    start_from: StartFrom,
    max_records_per_run: int | None,
    max_records_per_task: int,
    topic: str = "",
) -> list[OffsetRange]:
    """The contract's entry point: only the ranges of `plan_offsets`."""
    plan = plan_offsets(
        topic, committed, watermarks, start_from, max_records_per_run, max_records_per_task
    )
    return list(plan.ranges)


def offsets_after(
    start_offsets: Mapping[int, int], ranges: list[OffsetRange] | tuple[OffsetRange, ...]
) -> dict[int, int]:
    """Next offset per partition once `ranges` are consumed (contiguous from the start)."""
    after = dict(start_offsets)
    for offset_range in ranges:
        after[offset_range.partition] = max(after.get(offset_range.partition, 0), offset_range.end)
    return after
