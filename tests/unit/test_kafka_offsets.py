"""Offset range planning (pure)."""

from __future__ import annotations

import pytest

from tableflow_core.kafka.offsets import (
    OffsetRange,
    lost_offsets_text,
    offsets_after,
    plan_offset_ranges,
    plan_offsets,
)

T = "orders"


def covered(ranges: list[OffsetRange] | tuple[OffsetRange, ...], partition: int) -> list[int]:
    return [o for r in ranges if r.partition == partition for o in range(r.start, r.end)]


def test_reads_from_committed_to_high_watermark_split_per_task() -> None:
    plan = plan_offsets(T, {0: 10, 1: 0}, {0: (0, 100), 1: (0, 5)}, max_records_per_task=40)
    assert plan.ranges == (
        OffsetRange(T, 0, 10, 50),
        OffsetRange(T, 0, 50, 90),
        OffsetRange(T, 0, 90, 100),
        OffsetRange(T, 1, 0, 5),
    )
    assert plan.gaps == ()
    assert offsets_after(plan.start_offsets, plan.ranges) == {0: 100, 1: 5}


def test_new_partitions_and_start_positions() -> None:
    watermarks = {0: (3, 10), 1: (0, 7)}
    assert covered(plan_offsets(T, {}, watermarks, "earliest").ranges, 0) == list(range(3, 10))
    latest = plan_offsets(T, {}, watermarks, "latest")
    assert latest.ranges == () and latest.start_offsets == {0: 10, 1: 7}
    by_time = plan_offsets(T, {}, watermarks, 1_700_000_000_000, offsets_for_time={0: 8, 1: -1})
    assert by_time.ranges == (OffsetRange(T, 0, 8, 10),)
    # A partition added to the topic after the table started is read from its start,
    # whatever start_from says (it applies to a table's first run only).
    for start in ("earliest", "latest", 1_700_000_000_000):
        plan = plan_offsets(T, {0: 10}, watermarks, start, offsets_for_time={1: 5})
        assert plan.ranges == (OffsetRange(T, 1, 0, 7),) and plan.gaps == ()
    # ... and records deleted from it before the table saw them are a reported loss.
    (gap,) = plan_offsets(T, {0: 10}, {0: (3, 10), 1: (4, 7)}, "latest").gaps
    assert gap == OffsetRange(T, 1, 0, 4)


def test_retention_gap_is_reported_not_hidden() -> None:
    plan = plan_offsets(T, {0: 5}, {0: (20, 30)})
    assert plan.ranges == (OffsetRange(T, 0, 20, 30),)
    (gap,) = plan.gaps
    assert gap == OffsetRange(T, 0, 5, 20)
    told = lost_offsets_text(T, gap.partition, gap.start, gap.end)
    assert "partition 0" in told and "5..19" in told and "(15 records)" in told


def test_run_cap_is_fair_and_contiguous() -> None:
    watermarks = {0: (0, 1000), 1: (0, 10), 2: (0, 1000)}
    plan = plan_offsets(T, {}, watermarks, max_records_per_run=300, max_records_per_task=100)
    assert plan.total_records == 300
    assert covered(plan.ranges, 1) == list(range(10))  # small partition fully read
    assert covered(plan.ranges, 0) == list(range(145))  # leftover shared fairly
    assert covered(plan.ranges, 2) == list(range(145))
    # the next run continues exactly where this one stopped
    nxt = plan_offsets(T, offsets_after(plan.start_offsets, plan.ranges), watermarks)
    assert covered(nxt.ranges, 0) == list(range(145, 1000))
    assert covered(nxt.ranges, 1) == []


def test_contract_entry_point_and_validation() -> None:
    ranges = plan_offset_ranges({0: 0}, {0: (0, 3)}, "earliest", None, 2, topic=T)
    assert ranges == [OffsetRange(T, 0, 0, 2), OffsetRange(T, 0, 2, 3)]
    with pytest.raises(ValueError):
        plan_offsets(T, {}, {0: (0, 1)}, max_records_per_task=0)
