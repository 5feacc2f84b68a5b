"""The DAG executor and the per-table lock (no Spark)."""

from __future__ import annotations

import subprocess
import sys
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


def test_lock_of_a_killed_process_is_free(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time; from pathlib import Path; from tableflow_core.runner.lock import table_locks\n"
            f"with table_locks(Path({str(tmp_path)!r}), ['orders']):\n"
            "    print('held', flush=True); time.sleep(60)"
        )],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with (
            pytest.raises(LockTimeoutError, match=f"pid {holder.pid}"),
            table_locks(tmp_path, ["orders"]),
        ):
            pass
        holder.kill()
        holder.wait()
        with table_locks(tmp_path, ["orders"], timeout_s=2):
            pass
    finally:
        if holder.poll() is None:
            holder.kill()
