"""Size-tiered compaction: which small files a compaction rewrites, so that a byte is
rewritten a bounded number of times however long the table lives.

Iceberg's bin-pack rewrites every file under `min-file-size-bytes` (default 75% of the
target size). A table that gets a small file a commit and is compacted every 10 commits
then rewrites all of itself each time until it reaches that size: in the accelerated soak
(benchmarks/soak.py, one table, 20,000 commits of ~10 records) the bytes a compaction
rewrote grew with the table (29 KB -> 1.5 MB) and so did its time (0.4 -> 2.9 s, beside
ingest), and commits slowed with it (p95 0.38 -> 0.68 s). At a month of a 1-second table,
up to 96 MB (128 MB target) would be rewritten every 10 commits.

Files are sorted into tiers by size, each `TIER_RATIO` times the one below, from
`SMALLEST_TIER_BYTES` up to the small-file size (`CompactSettings.small_file_bytes`).
A compaction rewrites the files of the lowest tier, and those of every tier up to the
highest one that holds `TIER_RATIO` files: those add up to at least the next tier's
size, so the file written moves up. A byte is rewritten about once per tier (7 from
16 KB to 96 MB), and a partition keeps fewer than `TIER_RATIO` files per tier besides
the files of its commits since the last compaction (what readers plan over).

Spark's procedure selects by one threshold a call (`min-file-size-bytes`): the highest
any partition needs. A partition whose own tiers need less has its files under that
threshold rewritten too when it has `min_input_files` of them (Spark's own rule): it
costs more than its tiers would, only while another partition climbs a tier at the same
moment, and a partition nothing is written to has one file there at most.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# Each tier's files are up to this many times larger than the one below; a tier holding
# this many files is merged into the next. 4: at most 3 files a tier between
# compactions, a byte rewritten ~7 times between 16 KB and 96 MB.
TIER_RATIO = 4
# Files under this are the lowest tier, merged by every compaction (a commit of a few
# records writes a file of a few KB).
SMALLEST_TIER_BYTES = 16 * 1024


def tier_bounds(small_file_bytes: int) -> tuple[int, ...]:
    """Each tier's upper bound, ascending; the last is `small_file_bytes` (files at or
    above it are not small: Spark's bin-pack leaves them, unless above its maximum)."""
    bounds = [small_file_bytes]
    while bounds[-1] // TIER_RATIO >= SMALLEST_TIER_BYTES:
        bounds.append(bounds[-1] // TIER_RATIO)
    return tuple(reversed(bounds))


def tier_of(size: int, bounds: Sequence[int]) -> int:
    """The index of the first bound above `size`; `len(bounds)` for a file that is not small."""
    for index, bound in enumerate(bounds):
        if size < bound:
            return index
    return len(bounds)


def partition_threshold(sizes: Iterable[int], bounds: Sequence[int]) -> int:
    """The bound under which this partition's files are rewritten now: that of the
    lowest tier, or of the highest tier holding `TIER_RATIO` files."""
    counts = [0] * (len(bounds) + 1)
    for size in sizes:
        counts[tier_of(size, bounds)] += 1
    full = [index for index in range(len(bounds)) if counts[index] >= TIER_RATIO]
    return bounds[max(full, default=0)]


def compaction_threshold(partitions: Iterable[Iterable[int]], small_file_bytes: int) -> int:
    """`min-file-size-bytes` for one compaction of a table: the highest threshold any of
    its partitions (each the sizes of its data files) needs."""
    bounds = tier_bounds(small_file_bytes)
    return max((partition_threshold(sizes, bounds) for sizes in partitions), default=bounds[0])
