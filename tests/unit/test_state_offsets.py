"""Finding committed offsets in snapshot ancestry and the table-property fallback (pure)."""

from __future__ import annotations

import pytest

from tableflow_core.state.offsets import (
    OFFSETS_KEY,
    OffsetStateError,
    SnapshotInfo,
    encode_offsets,
    find_committed_offsets,
)


def snap(sid: int, parent: int | None, offsets: dict[int, int] | None = None) -> SnapshotInfo:
    summary = {OFFSETS_KEY: encode_offsets("t", offsets)} if offsets is not None else {}
    return SnapshotInfo(sid, parent, summary)


def test_newest_offsets_in_the_current_ancestry_win() -> None:
    # 1 -> 2 (offsets) -> 3 (rewrite, no summary) ; 4 is a side branch, not an ancestor
    snapshots = [snap(1, None, {0: 5}), snap(2, 1, {0: 9}), snap(3, 2), snap(4, 2, {0: 99})]
    found = find_committed_offsets(3, snapshots, {})
    assert found is not None and found.offsets == {0: 9} and found.snapshot_id == 2


def test_falls_back_to_the_table_property_after_expiry() -> None:
    props = {OFFSETS_KEY: encode_offsets("t", {0: 7, 1: 3})}
    found = find_committed_offsets(3, [snap(3, 2)], props)  # parent 2 expired
    assert found is not None and found.offsets == {0: 7, 1: 3} and found.source == "property"
    assert find_committed_offsets(None, [], {}) is None


def test_other_topic_or_corrupt_state_is_an_error() -> None:
    with pytest.raises(OffsetStateError, match="topic 't'"):
        find_committed_offsets(1, [snap(1, None, {0: 1})], {}, topic="other")
    with pytest.raises(OffsetStateError, match="snapshot 1"):
        find_committed_offsets(1, [SnapshotInfo(1, None, {OFFSETS_KEY: "{"})], {})
