"""Size-tiered compaction (`maintenance/tiers.py`): the threshold each compaction passes
to Spark's bin-pack, and over 20,000 commits of small files, what a model of that
bin-pack rewrites and leaves."""

from __future__ import annotations

import itertools

from tableflow_core.config.models.maintenance import CompactSettings
from tableflow_core.maintenance.tiers import (
    SMALLEST_TIER_BYTES,
    TIER_RATIO,
    compaction_threshold,
    partition_threshold,
    tier_bounds,
    tier_of,
)

KB, MB = 1024, 1024 * 1024
SMALL = CompactSettings().small_file_bytes  # 96 MB: 75% of the 128 MB target


def test_bounds_rise_by_the_ratio_from_the_smallest_tier_to_the_small_file_size() -> None:
    bounds = tier_bounds(SMALL)
    assert bounds[-1] == SMALL
    assert bounds[0] >= SMALLEST_TIER_BYTES > bounds[0] // TIER_RATIO
    assert all(high // low == TIER_RATIO for low, high in itertools.pairwise(bounds))
    assert tier_bounds(SMALLEST_TIER_BYTES) == (SMALLEST_TIER_BYTES,)


def test_tier_of_a_file() -> None:
    bounds = (24 * KB, 96 * KB, 384 * KB)
    assert tier_of(1, bounds) == 0
    assert tier_of(24 * KB - 1, bounds) == 0
    assert tier_of(24 * KB, bounds) == 1
    assert tier_of(383 * KB, bounds) == 2
    assert tier_of(384 * KB, bounds) == 3  # not small


def test_a_partition_rewrites_its_lowest_tier_until_a_tier_holds_the_ratio() -> None:
    bounds = (24 * KB, 96 * KB, 384 * KB, 1536 * KB)
    assert partition_threshold([2 * KB] * 10, bounds) == 24 * KB
    three_mid = [2 * KB] * 10 + [100 * KB] * (TIER_RATIO - 1)
    assert partition_threshold(three_mid, bounds) == 24 * KB
    assert partition_threshold([*three_mid, 200 * KB], bounds) == 384 * KB
    # The highest full tier wins, the tiers under it go with it.
    assert partition_threshold([30 * KB] * 4 + [100 * KB] * 4, bounds) == 384 * KB
    # Files that are not small never make a tier.
    assert partition_threshold([2 * MB] * 10, bounds) == 24 * KB


def test_the_table_takes_the_highest_threshold_of_its_partitions() -> None:
    quiet, climbing = [2 * KB] * 3, [30 * KB] * TIER_RATIO
    assert compaction_threshold([quiet], SMALL) == tier_bounds(SMALL)[0]
    assert compaction_threshold([quiet, climbing], SMALL) == tier_bounds(SMALL)[1]
    assert compaction_threshold([], SMALL) == tier_bounds(SMALL)[0]


def bin_pack(files: list[int], threshold: int, min_input_files: int, target: int) -> int:
    """A model of Spark's bin-pack in one partition: the files under `threshold`, when
    there are `min_input_files` of them, rewritten into files of at most `target`. Returns
    the bytes rewritten; `files` is changed in place."""
    chosen = [size for size in files if size < threshold]
    if len(chosen) < min_input_files:
        return 0
    for size in chosen:
        files.remove(size)
    total = sum(chosen)
    while total > target:
        files.append(target)
        total -= target
    files.append(total)
    return sum(chosen)


def soak_model(commits: int, file_bytes: int, tiered: bool) -> tuple[list[int], list[int]]:
    """A table getting a file of `file_bytes` a commit, compacted every 10 commits with the
    template's settings: the bytes each compaction rewrote, and the files after each."""
    settings = CompactSettings()
    files: list[int] = []
    rewritten, file_counts = [], []
    for commit in range(1, commits + 1):
        files.append(file_bytes)
        if commit % 10 == 0:
            threshold = (
                compaction_threshold([files], settings.small_file_bytes)
                if tiered
                else settings.small_file_bytes
            )
            rewritten.append(
                bin_pack(
                    files, threshold, settings.min_input_files, settings.target_file_size_bytes
                )
            )
            file_counts.append(len(files))
    return rewritten, file_counts


def test_a_byte_is_rewritten_once_per_tier_whatever_the_history() -> None:
    commits, file_bytes = 20_000, 3 * KB  # the accelerated soak: ~10 records a commit
    rewritten, file_counts = soak_model(commits, file_bytes, tiered=True)
    written = commits * file_bytes
    tiers = len(tier_bounds(CompactSettings().small_file_bytes))
    assert sum(rewritten) <= written * tiers
    # A compaction rewrites at most a tier's worth: what piled up, not the table.
    first, last = rewritten[: len(rewritten) // 10], rewritten[-len(rewritten) // 10 :]
    assert sorted(last)[len(last) // 2] <= 2 * sorted(first)[len(first) // 2]
    # Fewer than TIER_RATIO files a tier, and the 10 commits since the last compaction.
    assert max(file_counts) <= (TIER_RATIO - 1) * tiers + 10


def test_without_tiers_a_compaction_rewrites_the_whole_growing_table() -> None:
    """What the tiers are for (Iceberg's default selection: every file under 75% of the
    target), on the same model."""
    rewritten, _ = soak_model(20_000, 3 * KB, tiered=False)
    assert rewritten[-1] > 50 * rewritten[0]
    tiered, _ = soak_model(20_000, 3 * KB, tiered=True)
    assert sum(rewritten) > 20 * sum(tiered)
