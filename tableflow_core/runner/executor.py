"""Walking a DAG: every task runs once its dependencies succeeded; independent tasks
run concurrently in a thread pool (each submits its own Spark jobs to the one session).

A failed task skips its dependents and nothing else: other tables still finish. A task
many tables share (a shared ingest job: `DagTask.members`) waits until all its
dependencies ended, and runs for the members whose own dependencies succeeded.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Literal

from tableflow_core.plan.dag import Dag, DagTask, topological_order

TaskStatus = Literal["success", "error", "skipped"]


@dataclass(frozen=True)
class TaskOutcome:
    task_id: str
    status: TaskStatus
    # What the task returned; for a failed task, what its error says it did before
    # failing (`outcome` of an IngestError), if anything.
    value: Any = None
    error: str | None = None
    duration_s: float = 0.0


TaskRunner = Callable[[DagTask], Any]
EventHandler = Callable[[str, DagTask, TaskOutcome | None], None]  # ("start"|"end", task, outcome)


def execute_dag(
    dag: Dag,
    run_task: TaskRunner,
    max_workers: int = 4,
    on_event: EventHandler | None = None,
    describe_error: Callable[[BaseException], str] = str,
) -> dict[str, TaskOutcome]:
    ordered = topological_order(dag)  # also validates: no cycles, no unknown deps
    pending = {t.id: t for t in ordered}
    outcomes: dict[str, TaskOutcome] = {}
    running: dict[Future[Any], tuple[DagTask, float]] = {}
    notify = on_event or (lambda *_: None)

    def timed(task: DagTask) -> Any:
        return run_task(task)

    with ThreadPoolExecutor(
        max_workers=max(1, max_workers), thread_name_prefix="tableflow-task"
    ) as pool:
        while pending or running:
            for task_id in [t.id for t in ordered if t.id in pending]:
                ready = _ready(pending[task_id], outcomes)
                if ready is None:
                    continue
                task = pending.pop(task_id)
                if isinstance(ready, TaskOutcome):
                    outcomes[task_id] = ready
                    notify("end", task, ready)
                else:
                    notify("start", ready, None)
                    running[pool.submit(timed, ready)] = (ready, time.monotonic())
            if not running:
                continue
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in done:
                task, started = running.pop(future)
                elapsed = time.monotonic() - started
                error = future.exception()
                if error is None:
                    outcome = TaskOutcome(task.id, "success", future.result(), None, elapsed)
                else:
                    detail = describe_error(error)
                    if not detail:
                        detail = "".join(
                            traceback.format_exception_only(type(error), error)
                        ).strip()
                    partial = getattr(error, "outcome", None)
                    outcome = TaskOutcome(task.id, "error", partial, detail, elapsed)
                outcomes[task.id] = outcome
                notify("end", task, outcome)
    return outcomes


def _ready(task: DagTask, outcomes: dict[str, TaskOutcome]) -> DagTask | TaskOutcome | None:
    """What to do with a pending task: None to wait, a TaskOutcome when it is skipped, or
    the task to run (a shared one narrowed to the members whose dependencies succeeded)."""
    deps = [outcomes.get(d) for d in task.depends_on]
    failed = next((d for d in deps if d is not None and d.status != "success"), None)
    if task.members:
        if any(d is None for d in deps):
            return None
        members = tuple(
            m for m in task.members if all(outcomes[d].status == "success" for d in m.depends_on)
        )
        if members:
            return task.with_members(members) if members != task.members else task
    elif failed is None:
        return task if all(d is not None for d in deps) else None
    assert failed is not None
    return TaskOutcome(task.id, "skipped", error=f"skipped: {failed.task_id} did not succeed")
