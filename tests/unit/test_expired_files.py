"""Pure tests: the lists of files expiry frees (maintenance/expired_files.py)."""

from __future__ import annotations

from tableflow_core.catalog.placement import table_policy
from tableflow_core.maintenance.expired_files import (
    PendingList,
    confined,
    list_paths,
    list_text,
    parse_pending,
    render_pending,
    split_due,
)


def test_pending_lists_round_trip_and_split_by_their_moment() -> None:
    lists = (
        PendingList("s3://b/t/metadata/a.txt", 1_000),
        PendingList("s3://b/t/metadata/b.txt", 2_000),
    )
    assert parse_pending(render_pending(lists)) == lists
    assert split_due(lists, 1_000) == (lists[:1], lists[1:])
    assert split_due(lists, 999) == ((), lists)
    assert parse_pending(None) == () and parse_pending("") == ()


def test_a_property_that_is_not_ours_is_ignored() -> None:
    assert parse_pending("not json") == ()
    assert parse_pending('[{"list": "x"}]') == ()  # no moment: nothing is guessed
    assert parse_pending('{"list": "x", "after_ms": 1}') == ()


def test_only_paths_under_the_tables_folders_are_deletable() -> None:
    policy = table_policy(
        "s3://lake/db/orders", {"write.data.path": "s3://other/orders-data/", "owner": "x"}
    )
    assert policy.prefixes == ("s3://lake/db/orders/", "s3://other/orders-data/")
    inside, outside = confined(
        [
            "s3://lake/db/orders/data/a.parquet",
            "s3://other/orders-data/b.parquet",
            "s3://lake/db/orders-copy/c.parquet",  # a sibling sharing the prefix
            "s3://lake/db/orders/../payments/d.parquet",
            "s3://lake/db/payments/e.parquet",
        ],
        policy,
    )
    assert inside == ["s3://lake/db/orders/data/a.parquet", "s3://other/orders-data/b.parquet"]
    assert len(outside) == 3


def test_a_file_has_one_spelling() -> None:
    policy = table_policy("file:///w/db/t", {})
    assert policy.prefixes == ("file:///w/db/t/",)
    assert confined(["file:/w/db/t/data/a.parquet", "/w/db/t/b", "file:/w/db/u/c"], policy) == (
        ["file:/w/db/t/data/a.parquet", "/w/db/t/b"],
        ["file:/w/db/u/c"],
    )
    # Another scheme is another place, as the catalog compares them.
    assert confined(["s3a://lake/t/x"], table_policy("s3://lake/t", {})) == ([], ["s3a://lake/t/x"])


def test_list_text_round_trips() -> None:
    paths = ["file:/w/t/data/a.parquet", "file:/w/t/metadata/snap-1.avro"]
    assert list_paths(list_text(paths)) == paths
    assert list_paths("\n  \n") == []
