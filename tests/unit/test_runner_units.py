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
