"""The DAG executor and the per-table lock (no Spark)."""

from __future__ import annotations

import threading
import time

import pytest

from tableflow_core.plan.dag import Dag, DagError, DagTask, topological_order
from tableflow_core.runner.executor import execute_dag
from tableflow_core.runner.lock import LockTimeoutError, table_locks


def dag(*tasks: tuple[str, tuple[str, ...]]) -> Dag:
    return Dag(tasks=tuple(DagTask(id=i, kind="ingest", table=i, depends_on=d) for i, d in tasks))


def test_independent_tasks_run_concurrently_and_failures_skip_dependents():
    running, peak, lock = set(), [0], threading.Lock()

    def run(task):
        with lock:
            running.add(task.id)
            peak[0] = max(peak[0], len(running))
        time.sleep(0.2)
        with lock:
            running.discard(task.id)
        if task.id == "bad":
            raise RuntimeError("broker down")
        return task.id

    graph = dag(("a", ()), ("b", ()), ("bad", ()), ("after_bad", ("bad",)), ("after_a", ("a",)))
    outcomes = execute_dag(graph, run, max_workers=3)
    assert peak[0] == 3
    assert {k: v.status for k, v in outcomes.items()} == {
        "a": "success",
        "b": "success",
        "bad": "error",
        "after_bad": "skipped",
        "after_a": "success",
    }
    assert outcomes["bad"].error == "broker down"


def test_cycles_and_unknown_dependencies_are_rejected():
    with pytest.raises(DagError, match="cycle"):
        topological_order(dag(("a", ("b",)), ("b", ("a",))))
    with pytest.raises(DagError, match="unknown"):
        topological_order(dag(("a", ("zzz",))))


def test_second_apply_waits_then_fails_naming_the_holder(tmp_path):
    with table_locks(tmp_path, ["orders", "customers"], command="tableflow apply #1"):
        started = time.monotonic()
        with (
            pytest.raises(LockTimeoutError) as error,
            table_locks(tmp_path, ["orders"], timeout_s=0.5),
        ):
            pass
        assert time.monotonic() - started >= 0.5
        assert "table orders is locked by pid" in str(error.value) and "tableflow apply #1" in str(
            error.value
        )
        with table_locks(tmp_path, ["payments"], timeout_s=0):
            pass  # other tables stay free
    with table_locks(tmp_path, ["orders"], timeout_s=0):
        pass  # released


def test_a_thousand_held_locks_leave_low_descriptors_to_select(tmp_path):
    """An apply of 1,100 tables holds 1,100 lock files; descriptors opened meanwhile stay
    below FD_SETSIZE (pyspark's accumulator server select()s its sockets), and every lock
    is released afterwards."""
    import resource
    import select
    import socket

    from tableflow_core.runner.lock import HIGH_FD_FLOOR

    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < HIGH_FD_FLOOR + 1100 + 1024:
        pytest.skip("the hard open-file limit is too low for this test")
    tables = [f"t{i:04d}" for i in range(1100)]
    with table_locks(tmp_path, tables):
        sockets = [socket.socket() for _ in range(8)]
        try:
            assert all(s.fileno() < HIGH_FD_FLOOR for s in sockets)
            select.select(sockets, [], [], 0)  # raised ValueError when held locks were low
        finally:
            for s in sockets:
                s.close()
        with pytest.raises(LockTimeoutError), table_locks(tmp_path, ["t0999"], timeout_s=0):
            pass
    with table_locks(tmp_path, tables, timeout_s=0):
        pass  # all released
