"""The read tasks' dedup on Arrow (pipeline/transforms/arrow_dedup.py) and when it runs
(pipeline/transforms/read_task_dedup.py): pure, no Spark."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from tableflow_core.config.models.transforms import Transform
from tableflow_core.config.project import SourceLocation
from tableflow_core.ingest.bad_records import SOURCE_OFFSET_COLUMN, SOURCE_PARTITION_COLUMN
from tableflow_core.ingest.columns import (
    BAD_RECORD_COLUMN,
    BAD_RECORD_STRUCT,
    DUPLICATE_COLUMN,
    TOMBSTONE_COLUMN,
)
from tableflow_core.ingest.placement import MAX_RECORDS, read_task_dedup_step
from tableflow_core.pipeline.task_keys import (
    KeyReportParam,
    KeyReports,
    TaskKeyReport,
    TaskKeys,
    TaskKeysRun,
)
from tableflow_core.pipeline.transforms.arrow_dedup import (
    TaskDedup,
    duplicate_flags,
    flag_duplicates,
    key_digests,
    keys_in_several_tasks,
)
from tableflow_core.pipeline.transforms.read_task_dedup import (
    KEYS_ACROSS_TASKS_PROPERTY,
    allowed_by_last_run,
    run_summary,
)
from tableflow_core.transforms import compile_transforms
from tableflow_core.transforms.decode_masks import masks_at_decode
from tableflow_core.transforms.key_types import dedupable_key_type


def batch(rows: list[tuple[Any, int, int]], key_type: pa.DataType = pa.int64()) -> pa.Table:
    """(key, partition, offset) rows of a decoded batch, all good."""
    n = len(rows)
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], key_type),
            "v": pa.array([f"{r[1]}:{r[2]}" for r in rows]),
            SOURCE_PARTITION_COLUMN: pa.array([r[1] for r in rows], pa.int32()),
            SOURCE_OFFSET_COLUMN: pa.array([r[2] for r in rows], pa.int64()),
            TOMBSTONE_COLUMN: pa.array([False] * n),
            BAD_RECORD_COLUMN: pa.nulls(n, BAD_RECORD_STRUCT),
        }
    )


def kept(table: pa.Table, keep: str, good: Any = None) -> list[str]:
    if good is None:
        good = np.ones(table.num_rows, dtype=bool)
    flags = duplicate_flags(table, ("k",), keep, good)  # type: ignore[arg-type]
    return sorted(v for v, f in zip(table.column("v").to_pylist(), flags, strict=True) if not f)


def test_keep_last_and_first_by_partition_then_offset_not_by_row_order() -> None:
    # rows arrive out of order: the task read partition 1's range before partition 0's
    table = batch([(7, 1, 3), (7, 1, 9), (8, 1, 4), (7, 0, 50), (8, 0, 2)])
    assert kept(table, "last") == ["1:4", "1:9"]
    assert kept(table, "first") == ["0:2", "0:50"]


def test_null_keys_are_one_key_and_rows_of_bad_records_are_never_flagged() -> None:
    table = batch([(None, 0, 1), (None, 0, 2), (1, 0, 3), (1, 0, 4)])
    good = np.array([True, True, True, False])  # offset 4 is a bad record's row
    assert kept(table, "last", good) == ["0:2", "0:3", "0:4"]


def test_a_task_without_repeats_flags_nothing() -> None:
    table = batch([(i, 0, i) for i in range(1000)])
    assert not duplicate_flags(table, ("k",), "last", np.ones(1000, dtype=bool)).any()


def reference_kept(rows: list[tuple[Any, int, int]], keep: str) -> list[str]:
    best: dict[Any, tuple[int, int]] = {}
    for key, partition, offset in rows:
        position = (partition, offset)
        known = best.get(key)
        if known is None or (position > known if keep == "last" else position < known):
            best[key] = position
    return sorted(f"{p}:{o}" for p, o in best.values())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.integers(-3, 3)), st.integers(0, 2)),
        min_size=1,
        max_size=60,
    ),
    st.sampled_from(["first", "last"]),
)
def test_flags_match_a_reference_dedup(keys_partitions: list[tuple[Any, int]], keep: str) -> None:
    # unique (partition, offset) positions, in a shuffled order
    rows = [(k, p, i * 7 % 61) for i, (k, p) in enumerate(keys_partitions)]
    rows = list({(p, o): (k, p, o) for k, p, o in rows}.values())[::-1]
    assert kept(batch(rows), keep) == reference_kept(rows, keep)
    # the task's pass (which skips the grouping when no digest repeats) flags the same
    table = batch(rows)
    dedup = TaskDedup(("k",), "last" if keep == "last" else "first", "dedup")
    flagged, survivors, digests = flag_duplicates(table.to_batches(), dedup, table.schema, 7)
    assert sorted(survivors.column("v").to_pylist()) == reference_kept(rows, keep)
    assert digests.tolist() == key_digests(survivors, ("k",)).tolist()
    flags = pa.Table.from_batches(flagged).column(DUPLICATE_COLUMN).to_pylist()
    assert sum(flags) == len(rows) - survivors.num_rows


def test_a_task_running_the_dedup_flags_rows_and_reports_the_kept_keys() -> None:
    table = batch([(1, 0, 0), (2, 0, 1), (1, 0, 2), (None, 0, 3)])
    keys = TaskKeys(TaskDedup(("k",), "last", "dedup"), unique=(("k",),))
    run = TaskKeysRun(keys, table.schema, chunk_rows=2)
    out = list(run.batches(table.to_batches(max_chunksize=3)))
    flagged = pa.Table.from_batches(out)
    assert flagged.schema.names == [*table.schema.names, DUPLICATE_COLUMN]
    assert flagged.column(DUPLICATE_COLUMN).to_pylist() == [True, False, False, False]
    assert all(b.num_rows <= 2 for b in out)
    report = run.report()
    kept = batch([(2, 0, 1), (1, 0, 2), (None, 0, 3)])
    assert report.dedup is not None
    assert report.dedup.tolist() == key_digests(kept, ("k",)).tolist()
    # the unique key: a digest per kept row, the all-NULL key left out
    assert (
        sorted(report.unique[0].tolist())
        == key_digests(batch([(2, 0, 1), (1, 0, 2)]), ("k",)).tolist()
    )


def test_a_task_reporting_keys_passes_its_batches_as_they_come() -> None:
    table = batch([(1, 0, 0), (1, 0, 1), (3, 0, 2)])
    keys = TaskKeys(TaskDedup(("k",), "last", "report"), unique=(("k",),))
    run = TaskKeysRun(keys, table.schema, chunk_rows=10)
    decoded = table.to_batches(max_chunksize=2)
    assert list(run.batches(decoded)) == decoded  # no flags: Spark's shuffle dedups
    report = run.report()
    assert report.dedup is not None and len(report.dedup) == 2
    assert len(report.unique[0]) == 3  # every row's key: the repeat within the task shows


class Accumulator:
    def __init__(self, value: dict[int, TaskKeyReport]) -> None:
        self.value = value


def reported(*tasks: list[int], mode: Any = "dedup") -> KeyReports:
    keys = TaskKeys(TaskDedup(("k",), "last", mode), unique=(("k",),))
    value = {}
    for index, ids in enumerate(tasks):
        run = TaskKeysRun(keys, batch([(0, 0, 0)]).schema, chunk_rows=10)
        list(run.batches(batch([(k, index, o) for o, k in enumerate(ids)]).to_batches()))
        value[index] = run.report()
    return KeyReports(Accumulator(value), tasks=len(tasks), keys=keys)


def test_the_driver_reads_the_reports_once_and_empties_the_accumulator() -> None:
    disjoint = reported([1, 2], [3])
    assert disjoint.dedup_keys_across_tasks() == 0
    assert disjoint.distinct() == {("k",)}
    assert disjoint.accumulator.value == {}  # released: the driver keeps accumulators
    assert disjoint.dedup_keys_across_tasks() == 0  # read once, remembered
    across = reported([1, 2], [2, 3], [3])
    assert across.dedup_keys_across_tasks() == 2 and across.distinct() == frozenset()
    # a repeat within one task: the task's dedup leaves one row, so the rows kept are
    # distinct; when Spark's shuffle dedups (the task only reports), nothing is proven
    assert reported([1, 1], [2]).distinct() == {("k",)}
    within = reported([1, 1], [2], mode="report")
    assert within.dedup_keys_across_tasks() == 0 and within.distinct() == frozenset()


def test_a_missing_task_report_proves_nothing() -> None:
    reports = reported([1], [2])
    short = KeyReports(Accumulator(dict(list(reports.accumulator.value.items())[:1])), 2,
                       reports.keys)  # fmt: skip
    assert short.dedup_keys_across_tasks() is None
    assert short.distinct() == frozenset()


KEY_VALUES = [
    (pa.int64(), [0, -1, 2**62, None]),
    (pa.int32(), [0, -1, 5, None]),
    (pa.bool_(), [True, False, None]),
    (pa.string(), ["", "a", "None", None]),
    (pa.large_string(), ["x", "y", None]),
    (pa.binary(), [b"", b"\x00", b"a", None]),
    (pa.date32(), [dt.date(2024, 1, 1), dt.date(1969, 12, 31), None]),
    (pa.timestamp("us", tz="UTC"), [dt.datetime(2024, 1, 1, tzinfo=dt.UTC), None]),
    (pa.decimal128(10, 2), [Decimal("1.50"), Decimal("-1.50"), None]),
    (pa.time64("us"), [dt.time(1, 2, 3), dt.time(0, 0), None]),
]


@pytest.mark.parametrize(("data_type", "values"), KEY_VALUES)
def test_digests_are_equal_for_equal_keys_in_any_task_and_distinct_otherwise(
    data_type: pa.DataType, values: list[Any]
) -> None:
    assert dedupable_key_type(data_type)
    one_each = [key_digests(batch([(v, 0, 0)], data_type), ("k",))[0] for v in values]
    assert len(set(one_each)) == len(values)  # distinct keys, distinct digests (NULL too)
    together = key_digests(batch([(v, 0, i) for i, v in enumerate(values)], data_type), ("k",))
    assert sorted(together.tolist()) == sorted(int(d) for d in one_each)


@pytest.mark.parametrize(("data_type", "values"), KEY_VALUES)
def test_every_key_type_read_tasks_dedup_on_groups_like_a_reference(
    data_type: pa.DataType, values: list[Any]
) -> None:
    rows = [(v, 0, i) for i, v in enumerate([*values, *reversed(values)])]
    assert kept(batch(rows, data_type), "last") == reference_kept(rows, "last")
    assert kept(batch(rows, data_type), "first") == reference_kept(rows, "first")


def test_integer_digests_do_not_depend_on_other_rows_being_null() -> None:
    # A task whose column has a NULL and one whose column has none: equal keys must meet.
    with_null = key_digests(batch([(5, 0, 0), (None, 0, 1)]), ("k",))
    without = key_digests(batch([(5, 1, 0)]), ("k",))
    assert keys_in_several_tasks({0: with_null, 1: without}) == 1


def test_digests_of_several_columns_tell_the_columns_apart() -> None:
    table = pa.table({"a": [1, 2], "b": [2, 1]})
    assert len(key_digests(table, ("a", "b"))) == 2
    assert len(key_digests(pa.table({"a": [1, 1], "b": [2, 2]}), ("a", "b"))) == 1


def test_floats_and_nested_keys_are_left_to_spark() -> None:
    assert not dedupable_key_type(pa.float64())
    assert not dedupable_key_type(pa.timestamp("ns"))  # Spark truncates to microseconds
    assert not dedupable_key_type(pa.struct([("a", pa.int64())]))
    assert not dedupable_key_type(pa.list_(pa.int64()))


def test_keys_in_several_tasks_counts_each_repeated_key_once() -> None:
    a = key_digests(batch([(1, 0, 0), (2, 0, 1), (3, 0, 2)]), ("k",))
    b = key_digests(batch([(2, 1, 0), (3, 1, 1)]), ("k",))
    c = key_digests(batch([(3, 2, 0)]), ("k",))
    assert keys_in_several_tasks({0: a}) == 0
    assert keys_in_several_tasks({0: a, 1: key_digests(batch([(9, 1, 0)]), ("k",))}) == 0
    assert keys_in_several_tasks({0: a, 1: b, 2: c}) == 2


def test_a_task_reported_twice_replaces_its_own_entry() -> None:
    param = KeyReportParam()
    report = TaskKeyReport(np.array([1], dtype=np.uint64), ())
    value = param.zero({})
    value = param.addInPlace(value, {0: report})
    value = param.addInPlace(value, {0: report})
    assert list(value) == [0]


SCHEMA = pa.schema([("id", pa.int64()), ("user", pa.string()), ("score", pa.float64()),
                    ("status", pa.string())])  # fmt: skip


def in_spark(*transforms: dict[str, Any]) -> Any:
    """The chain Spark would run: the configured one less the masks decoding runs."""
    chain = compile_transforms(
        TypeAdapter(list[Transform]).validate_python(list(transforms)),
        SCHEMA,
        lambda key: SourceLocation(Path("tables/t.yml"), 1),
    )
    return chain.without(masks_at_decode(chain))


def test_the_dedup_runs_in_the_read_tasks_when_it_is_the_first_step_spark_would_run() -> None:
    mask = {"type": "mask", "columns": ["user"], "method": "redact"}
    dedup = {"type": "dedup", "keys": ["id"], "keep": "last"}
    step = read_task_dedup_step(in_spark(mask, dedup, {"type": "filter", "where": "status <> 'x'"}))
    assert step is not None and step.keys == ("id",)
    # a filter before it: the dedup compares only the rows the filter kept
    assert (
        read_task_dedup_step(in_spark({"type": "filter", "where": "status <> 'x'"}, dedup)) is None
    )
    # a float key: Spark's grouping of -0.0 and NaN is Spark's
    assert read_task_dedup_step(in_spark({"type": "dedup", "keys": ["score"]})) is None
    # a mask of its key ran while decoding: it compares the masked values, as Spark would
    partial_key = {"type": "mask", "columns": ["status"], "method": "partial", "keep_first": 1}
    by_status = {"type": "dedup", "keys": ["status"]}
    assert read_task_dedup_step(in_spark(partial_key, by_status)) is not None


def test_the_last_runs_summary_decides_the_next_run() -> None:
    assert allowed_by_last_run(None) and allowed_by_last_run("0")
    assert not allowed_by_last_run("3")
    assert run_summary(TaskDedup(("id",), "last", "report"), 3, tasks=4) == {
        KEYS_ACROSS_TASKS_PROPERTY: "3",
        "tableflow.dedup.ran-in": "shuffle",
    }
    # one task sees no key across tasks: it says nothing the next run would choose by
    assert run_summary(TaskDedup(("id",), "last", "dedup"), 0, tasks=1) == {
        "tableflow.dedup.ran-in": "read tasks"
    }
    assert MAX_RECORDS >= 1_000_000


def test_a_maintenance_commit_after_a_run_does_not_hide_what_the_run_saw() -> None:
    from tableflow_core.state.offsets import SnapshotInfo
    from tableflow_core.state.table_state import TableState

    run = SnapshotInfo(1, None, {KEYS_ACROSS_TASKS_PROPERTY: "2"})
    compaction = SnapshotInfo(2, 1, {"operation": "replace"})
    other_branch = SnapshotInfo(3, 1, {KEYS_ACROSS_TASKS_PROPERTY: "0"})
    state = TableState(2, (run, compaction, other_branch), {"main": 2}, {})
    assert state.latest_on_main(KEYS_ACROSS_TASKS_PROPERTY) == "2"
    assert TableState(None, (), {}, {}).latest_on_main(KEYS_ACROSS_TASKS_PROPERTY) is None


def spec_with(transforms: list[dict[str, Any]], checks: list[dict[str, Any]], mode: str) -> Any:
    """What `unique_keys_in_read_tasks` reads of an IngestSpec."""
    from types import SimpleNamespace

    from tableflow_core.checks import compile_checks
    from tableflow_core.config.models.checks import Check
    from tableflow_core.plan.compiled import CompiledTable

    chain = compile_transforms(
        TypeAdapter(list[Transform]).validate_python(transforms),
        SCHEMA,
        lambda key: SourceLocation(Path("tables/t.yml"), 1),
    )
    compiled_checks = compile_checks(
        TypeAdapter(list[Check]).validate_python(checks),
        chain.output_schema,
        lambda key: SourceLocation(Path("tables/t.yml"), 1),
        default_on_failure="fail",
        dead_letter_configured=False,
    )
    return SimpleNamespace(compiled=CompiledTable(chain, compiled_checks), mode=mode)


def test_unique_checks_the_read_tasks_report_keys_for() -> None:
    from tableflow_core.kafka.offsets import OffsetRange
    from tableflow_core.pipeline.checks.read_task_unique import unique_keys_in_read_tasks

    ranges = [OffsetRange("t", 0, 0, 100)]
    unique: list[dict[str, Any]] = [{"type": "unique", "columns": ["id"]}, {"type": "unique", "columns": ["user", "status"]},
              {"type": "unique", "columns": ["score"]}]  # fmt: skip
    assert unique_keys_in_read_tasks(spec_with([], unique, "append"), ranges) == (
        ("id",),
        ("user", "status"),
    )  # a float key is left to the window
    # a filter or a dedup only takes rows out; a mask, derive, rename or drop changes keys
    chain: list[dict[str, Any]] = [{"type": "filter", "where": "id > 0"},
             {"type": "dedup", "keys": ["id"]},
             {"type": "mask", "columns": ["user"], "method": "redact"}]  # fmt: skip
    assert unique_keys_in_read_tasks(spec_with(chain, unique, "append"), ranges) == (("id",),)
    derived = [{"type": "derive", "column": "id", "expression": "id + 1"}]
    assert unique_keys_in_read_tasks(spec_with(derived, unique[:1], "append"), ranges) == ()
    # upsert tables, checks taking rows out, and big runs: the window
    assert unique_keys_in_read_tasks(spec_with([], unique, "upsert"), ranges) == ()
    skipping = [{**unique[0], "on_failure": "skip"}]
    assert unique_keys_in_read_tasks(spec_with([], skipping, "append"), ranges) == ()
    big = [OffsetRange("t", 0, 0, MAX_RECORDS + 1)]
    assert unique_keys_in_read_tasks(spec_with([], unique, "append"), big) == ()


@given(st.lists(st.integers(0, 2**64 - 1), max_size=50))
def test_distinct_is_numpys_unique(values: list[int]) -> None:
    from tableflow_core.pipeline.transforms.arrow_dedup import distinct

    digests = np.array(values, dtype=np.uint64)
    assert distinct(digests).tolist() == np.unique(digests).tolist()
