"""`tableflow run`'s lanes: which tables refresh together (pure), and the scheduler with
several lanes and its maintenance lane (threads, no process: cycles and maintenance are
stand-ins that record what ran when)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tableflow_core.config.models.dead_letter import IcebergDeadLetter, KafkaDeadLetter
from tableflow_core.runner.lanes import SHARED_LANE, Lane, assign_lanes, own_pipeline
from tableflow_core.runner.results import RunResults, TableResult, merge_run_results
from tableflow_core.runner.schedule import Schedule
from tableflow_core.tasks.run import (
    HELD_MAINTENANCE_SPACING_S,
    MAINTENANCE_LANE,
    CycleReport,
    RunTask,
)
from tableflow_core.tasks.status import last_runs

# A check only Spark judges (checks/arrow_checks.py: not row-local).
SPARK_CHECK = SimpleNamespace(type="unique", on_failure=None)
ROW_CHECK = SimpleNamespace(type="range", on_failure="dlq")


def table(name: str, interval: float = 1.0, **config: Any) -> Any:
    values: dict[str, Any] = {
        "checks": (), "transforms": (), "on_error": "fail", "publish_to": (),
        "formats": ("iceberg",), "partition_by": (), "sort_by": (), "maintenance": None,
        "mode": "append", "dlq": None,
    }  # fmt: skip
    return SimpleNamespace(name=name, refresh_interval_s=interval, **{**values, **config})


# --------------------------------------------------------------------- lane assignment


def test_tables_of_the_shared_job_share_a_lane_and_each_own_pipeline_has_its_own() -> None:
    tables = [
        table("d_dlq", on_error="dlq"),
        table("a_plain"),
        table("c_checked", checks=(SPARK_CHECK,)),
        table("b_upsert", mode="upsert"),
        table("e_delta", formats=("iceberg", "delta")),
        table("f_masked", transforms=("mask",)),
        table("g_published", publish_to=("lake",)),
        table("h_sorted", sort_by=("id",)),
    ]
    assert assign_lanes(tables) == (
        Lane(SHARED_LANE, ("a_plain", "b_upsert")),
        Lane("own:c_checked", ("c_checked",)),
        Lane("own:d_dlq", ("d_dlq",)),
        Lane("own:e_delta", ("e_delta",)),
        Lane("own:f_masked", ("f_masked",)),
        Lane("own:g_published", ("g_published",)),
        Lane("own:h_sorted", ("h_sorted",)),
    )
    assert own_pipeline(tables[2]) == "checks"
    assert own_pipeline(tables[0]) == "a dead-letter target"
    assert own_pipeline(tables[1]) is None


def test_an_append_table_with_row_local_checks_and_an_iceberg_dead_letter_table_shares() -> None:
    iceberg = IcebergDeadLetter(type="iceberg", table="ops.bad_records")
    kafka = KafkaDeadLetter(type="kafka", topic="bad-records")
    shares = table("a_checked", checks=(ROW_CHECK,), on_error="dlq", dlq=iceberg)
    assert own_pipeline(shares) is None
    assert own_pipeline(table("b", checks=(ROW_CHECK,), dlq=kafka)) == "a dead-letter target"
    masked = IcebergDeadLetter(type="iceberg", table="ops.bad_records", payload="masked")
    assert own_pipeline(table("c", checks=(ROW_CHECK,), dlq=masked)) == "a dead-letter target"
    upsert = table("d", mode="upsert", checks=(ROW_CHECK,), dlq=iceberg)
    assert own_pipeline(upsert) == "checks"
    mixed = table("e", checks=(ROW_CHECK, SPARK_CHECK), dlq=iceberg)
    assert own_pipeline(mixed) == "checks"
    assert assign_lanes([shares, table("z")]) == (Lane(SHARED_LANE, ("a_checked", "z")),)


def test_past_the_lane_limit_tables_with_own_pipelines_share_lanes_round_robin() -> None:
    tables = [table(f"t{i}", checks=(SPARK_CHECK,)) for i in range(5)]
    assert assign_lanes(tables, max_own_lanes=2) == (
        Lane("own:t0+t2+t4", ("t0", "t2", "t4")),
        Lane("own:t1+t3", ("t1", "t3")),
    )
    assert assign_lanes([table("p"), table("q")]) == (Lane(SHARED_LANE, ("p", "q")),)


def test_a_lane_sleeps_until_its_next_free_table_and_is_woken_for_busy_ones() -> None:
    schedule = Schedule({"a": 10.0, "b": 12.0})
    assert schedule.seconds_until_next(5.0, excluding={"a"}) == 7.0
    assert schedule.seconds_until_next(5.0, excluding={"a", "b"}) == float("inf")
    assert Schedule({}).seconds_until_next(5.0) == 0.0


# --------------------------------------------------------------------- the scheduler


@dataclass
class Timed(RunTask):
    """RunTask whose cycles and maintenance are stand-ins taking `seconds[table]`."""

    seconds: dict[str, float] = field(default_factory=dict)
    maintenance_s: dict[str, float] = field(default_factory=dict)
    # Maintenance after every cycle unless a test spaces it (a minute in a real run).
    held_spacing_s: float | None = 0.0
    failing: frozenset[str] = frozenset()
    ran: list[tuple[str, str, float, float]] = field(default_factory=list)  # kind, table, t0, t1
    threads: set[str] = field(default_factory=set)
    _ran_lock: threading.Lock = field(default_factory=threading.Lock)

    def _spark_session(self) -> Any:
        return None

    def _cycle(self, due: tuple[str, ...], spark: Any) -> CycleReport:
        began = time.monotonic()
        if self.failing & set(due):
            raise RuntimeError(f"broken lane: {due}")
        time.sleep(max(self.seconds.get(name, 0.01) for name in due))
        self._record("cycle", due, began)
        return CycleReport(due)

    def _maintenance_due(
        self, report: CycleReport, waiting: frozenset[str] = frozenset()
    ) -> CycleReport:
        due = tuple(t.name for t in self._maintained(report, waiting))
        return replace(report, maintenance_due=due)

    def _maintain(self, name: str) -> CycleReport:
        began = time.monotonic()
        time.sleep(self.maintenance_s.get(name, 0.01))
        self._record("maintain", (name,), began)
        return CycleReport((), lane=MAINTENANCE_LANE, maintenance_due=(name,))

    def _record(self, kind: str, names: tuple[str, ...], began: float) -> None:
        with self._ran_lock:
            for name in names:
                self.ran.append((kind, name, began, time.monotonic()))

    def spans(self, kind: str, name: str) -> list[tuple[float, float]]:
        with self._ran_lock:
            return [(t0, t1) for k, n, t0, t1 in self.ran if k == kind and n == name]


def run_for(task: Timed, seconds: float) -> list[CycleReport]:
    """The reports of a run stopped after `seconds`, as `on_cycle` got them (a run until
    stopped keeps none itself)."""
    main = threading.current_thread().name
    reports: list[CycleReport] = []

    def on_cycle(report: CycleReport) -> None:
        task.threads.add(threading.current_thread().name)
        reports.append(report)

    task.on_cycle = on_cycle
    timer = threading.Timer(seconds, task.stop.set)
    timer.start()
    try:
        kept = task.run()
    finally:
        timer.cancel()
    assert task.threads <= {main}, task.threads  # observers and on_cycle: the caller's thread
    assert kept == [] and reports  # weeks of cycles are not kept in memory
    return reports


def project() -> Any:
    return SimpleNamespace(redact=lambda text: text)


def overlaps(spans: list[tuple[float, float]], within: tuple[float, float]) -> int:
    return sum(1 for t0, t1 in spans if t0 >= within[0] and t1 <= within[1])


def test_a_fast_lane_refreshes_on_its_interval_while_a_slow_lane_is_in_its_cycle() -> None:
    tables = (table("fast", 0.05), table("slow", 0.05, checks=(SPARK_CHECK,)))
    task = Timed(project(), tables, spark_factory=lambda: None, seconds={"slow": 0.6})
    reports = run_for(task, 1.5)
    slow = task.spans("cycle", "slow")
    fast = task.spans("cycle", "fast")
    assert 1 <= len(slow) <= 3
    assert overlaps(fast, slow[0]) >= 4  # the fast table did not wait for the slow one
    assert {r.lane for r in reports} == {SHARED_LANE, "own:slow"}
    assert all(r.tables in (("fast",), ("slow",)) for r in reports)


def test_maintenance_runs_in_its_lane_between_two_refreshes_of_its_table() -> None:
    tables = (
        table("kept", 0.05, maintenance={"every": "1h"}, mode="upsert"),
        table("other", 0.05),
    )
    task = Timed(project(), tables, spark_factory=lambda: None, maintenance_s={"kept": 0.5})
    reports = run_for(task, 1.5)
    maintained = task.spans("maintain", "kept")
    kept = task.spans("cycle", "kept")
    assert maintained and kept
    # The table sits out while maintained: no cycle of it overlaps its maintenance, and
    # its refreshes and maintenance alternate.
    for m0, m1 in maintained:
        assert not any(t0 < m1 and t1 > m0 for t0, t1 in kept)
    events = sorted([(t0, "cycle") for t0, _ in kept] + [(t0, "maintain") for t0, _ in maintained])
    assert all(a[1] != b[1] for a, b in itertools.pairwise(events))
    # The other table of its lane went on meanwhile.
    assert overlaps(task.spans("cycle", "other"), maintained[0]) >= 4
    maintenance_reports = [r for r in reports if not r.refreshed]
    assert maintenance_reports and all(
        r.lane == MAINTENANCE_LANE and r.maintenance_due == ("kept",) for r in maintenance_reports
    )


def test_an_append_table_refreshes_while_it_is_maintained_beside_its_ingest() -> None:
    tables = (table("plain", 0.05, maintenance={"every": "1h"}),)
    task = Timed(project(), tables, spark_factory=lambda: None, maintenance_s={"plain": 0.5})
    run_for(task, 1.5)
    maintained = task.spans("maintain", "plain")
    assert maintained
    assert overlaps(task.spans("cycle", "plain"), maintained[0]) >= 4


def test_a_table_held_for_maintenance_is_held_at_most_once_per_spacing() -> None:
    """Maintenance due after every refresh: the upsert table (maintained under its lock)
    is held at most once per `held_spacing_s`, and refreshes between; the append table
    (maintained beside its ingest, never held) is maintained whenever it is due."""
    tables = (
        table("keyed", 0.02, maintenance={"every": "1h"}, mode="upsert"),
        table("plain", 0.02, maintenance={"every": "1h"}),
    )
    task = Timed(
        project(), tables, spark_factory=lambda: None,
        maintenance_s={"keyed": 0.05, "plain": 0.05}, held_spacing_s=0.6,
    )  # fmt: skip
    run_for(task, 2.0)
    held = task.spans("maintain", "keyed")
    assert 2 <= len(held) <= 4, held
    # Each hold starts at least the spacing after the last one ended.
    assert all(b[0] - a[1] >= 0.6 for a, b in itertools.pairwise(held)), held
    assert len(task.spans("cycle", "keyed")) >= 3 * len(held)
    assert len(task.spans("maintain", "plain")) > 2 * len(held)


def test_a_bounded_run_maintains_after_every_cycle_and_one_until_stopped_spaces_holds() -> None:
    keyed = (table("keyed", 0.02, mode="upsert"),)
    assert RunTask(project(), keyed, lambda: None, max_cycles=3)._held_spacing() == 0.0
    assert RunTask(project(), keyed, lambda: None, once=True)._held_spacing() == 0.0
    assert RunTask(project(), keyed, lambda: None)._held_spacing() == HELD_MAINTENANCE_SPACING_S


def test_tables_queued_behind_a_busy_maintenance_lane_keep_refreshing() -> None:
    """Every table's maintenance takes 0.4 s and is due after every cycle: the
    maintenance lane is never idle. A table waiting in its queue refreshes meanwhile; it
    sits out only while it is maintained, and each table is queued once at a time."""
    tables = tuple(table(name, 0.02, maintenance={"every": "1h"}, mode="upsert") for name in "abc")
    task = Timed(
        project(), tables, spark_factory=lambda: None,
        maintenance_s={"a": 0.4, "b": 0.4, "c": 0.4},
    )  # fmt: skip
    run_for(task, 2.0)
    for name in "abc":
        maintained = task.spans("maintain", name)
        cycles = task.spans("cycle", name)
        assert 1 <= len(maintained) <= 3
        assert len(cycles) >= 3 * len(maintained), (name, len(cycles), len(maintained))
        for m0, m1 in maintained:
            assert not any(t0 < m1 and t1 > m0 for t0, t1 in cycles)
    starts = sorted(t0 for kind, _, t0, _ in task.ran if kind == "maintain")
    assert all(b - a >= 0.39 for a, b in itertools.pairwise(starts))  # one at a time


def test_once_refreshes_each_table_once_per_lane_and_waits_for_its_maintenance() -> None:
    tables = (
        table("a", 60.0, maintenance={"every": "1h"}),
        table("b", 60.0),
        table("c", 60.0, on_error="dlq"),
    )
    task = Timed(project(), tables, spark_factory=lambda: None, once=True)
    began = time.monotonic()
    reports = task.run()
    assert time.monotonic() - began < 5  # not the 60 s interval
    refreshed = sorted(r.tables for r in reports if r.refreshed)
    assert refreshed == [("a", "b"), ("c",)]
    assert [r.maintenance_due for r in reports if not r.refreshed] == [("a",)]


def test_max_cycles_counts_each_lanes_cycles() -> None:
    tables = (table("a", 0.01), table("c", 0.01, checks=(SPARK_CHECK,)))
    task = Timed(project(), tables, spark_factory=lambda: None, max_cycles=3)
    reports = task.run()
    assert sorted(r.tables for r in reports) == [("a",)] * 3 + [("c",)] * 3


def test_a_failing_lane_never_stops_the_others_and_stop_ends_every_lane() -> None:
    tables = (
        table("good", 0.05),
        table("broken", 0.05, checks=(SPARK_CHECK,)),
        table("sleepy", 3600.0, on_error="dlq"),  # asleep for an hour when stop comes
    )
    task = Timed(project(), tables, spark_factory=lambda: None, failing=frozenset({"broken"}))
    began = time.monotonic()
    reports = run_for(task, 1.0)
    assert time.monotonic() - began < 3  # every lane saw stop, the sleeping one too
    broken = [r for r in reports if r.tables == ("broken",)]
    assert len(broken) >= 3 and all(r.error and "broken lane" in r.error for r in broken)
    assert sum(1 for r in reports if r.tables == ("good",) and r.ok) >= 5
    assert sum(1 for r in reports if r.tables == ("sleepy",)) == 1


def test_a_run_whose_reporting_fails_ends_at_once_with_maintenance_waiting_on_a_cycle() -> None:
    """The run's reporting raises (e.g. stdout's reader is gone: a broken pipe) while the
    maintenance lane waits for a table's cycle in flight to end: the report that would
    release the table is never read, and the run still ends at once, the error raised
    (it waited for the join's timeout, 600 s per lane, before)."""
    tables = tuple(
        table(name, 0.01, maintenance={"every": "1h"}, mode="upsert") for name in ("a", "b")
    )
    task = Timed(
        project(), tables, spark_factory=lambda: None,
        seconds={"a": 0.5, "b": 0.5}, maintenance_s={"a": 0.05},
    )  # fmt: skip
    refreshed: list[CycleReport] = []

    def on_cycle(report: CycleReport) -> None:
        if report.refreshed:
            refreshed.append(report)
        if len(refreshed) == 2:  # b's second cycle, while the lane waits to maintain it
            raise BrokenPipeError(32, "Broken pipe")

    task.on_cycle = on_cycle
    began = time.monotonic()
    with pytest.raises(BrokenPipeError):
        task.run()
    assert time.monotonic() - began < 5
    assert refreshed[1].tables == ("b",)
    assert [name for kind, name, *_ in task.ran if kind == "maintain"] == ["a"]


# --------------------------------------------------------------------- run_results.json


def lane_results(finished_at: str, *tables: tuple[str, str]) -> RunResults:
    return RunResults(
        project="p", target="t", started_at=finished_at, finished_at=finished_at,
        duration_s=1.0, status="success", plan_summary="",
        tables=tuple(
            TableResult(table=name, identifier=f"ns.{name}", status=status,  # type: ignore[arg-type]
                        finished_at=finished_at)
            for name, status in tables
        ),
    )  # fmt: skip


def test_each_lane_keeps_the_other_lanes_tables_in_run_results(tmp_path: Path) -> None:
    path = tmp_path / "target" / "run_results.json"
    merge_run_results(lane_results("t1", ("a", "success"), ("b", "success")), path, tmp_path)
    merge_run_results(lane_results("t2", ("c", "error")), path, tmp_path)
    merge_run_results(lane_results("t3", ("a", "no_changes")), path, tmp_path)
    runs, problem = last_runs(path)
    assert problem is None
    assert {name: (r.status, r.finished_at) for name, r in runs.items()} == {
        "a": ("no_changes", "t3"),
        "b": ("success", "t1"),
        "c": ("error", "t2"),
    }
    # A file from before `finished_at` per table: its tables get the file's.
    old = json.loads(path.read_text())
    for entry in old["tables"]:
        entry.pop("finished_at")
    path.write_text(json.dumps(old))
    merge_run_results(lane_results("t4", ("c", "success")), path, tmp_path)
    runs, _ = last_runs(path)
    assert {name: r.finished_at for name, r in runs.items()} == {"a": "t3", "b": "t3", "c": "t4"}


def test_lanes_writing_at_once_lose_no_table(tmp_path: Path) -> None:
    path = tmp_path / "run_results.json"
    threads = [
        threading.Thread(
            target=lambda i=i: [
                merge_run_results(lane_results(f"r{n}", (f"t{i}", "success")), path, tmp_path)
                for n in range(20)
            ]
        )
        for i in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(last_runs(path)[0]) == ["t0", "t1", "t2", "t3"]
