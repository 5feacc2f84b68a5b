"""Progress of a running apply on the terminal (rich), fed by executor events."""

from __future__ import annotations

import threading

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from tableflow_core.plan.dag import DagTask
from tableflow_core.runner.executor import TaskOutcome

STATUS_STYLE = {"success": "green", "error": "bold red", "skipped": "yellow"}


class ApplyProgress:
    """A bar over all DAG tasks plus one line per finished task."""

    def __init__(self, console: Console, total_tasks: int) -> None:
        self.console = console
        self._lock = threading.Lock()
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} tasks"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        self._bar = self._progress.add_task("applying", total=total_tasks)
        self._running: set[str] = set()

    def __enter__(self) -> ApplyProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._progress.stop()

    def on_event(self, event: str, task: DagTask, outcome: TaskOutcome | None) -> None:
        with self._lock:
            if event == "start":
                self._running.add(task.id)
            else:
                self._running.discard(task.id)
                self._progress.advance(self._bar)
                if outcome is not None:
                    status = outcome.status
                    extra = f": {outcome.error}" if outcome.error else ""
                    failed = failed_members(task, outcome)
                    if failed:  # the job ran; some of its tables' runs did not succeed
                        status = "error"
                        extra = (
                            f": {len(failed)} of {len(task.members)} table(s) failed "
                            f"({', '.join(failed)})"
                        )
                    self._progress.console.print(
                        f"[{STATUS_STYLE[status]}]{status:>7}[/] {task.id} "
                        f"({outcome.duration_s:.1f}s){extra}",
                        highlight=False,
                    )
            shown = ", ".join(sorted(self._running)) or "waiting"
            self._progress.update(self._bar, description=f"running {shown}"[:80])


def failed_members(task: DagTask, outcome: TaskOutcome) -> list[str]:
    """The tables of a job of several tables' runs (`task.members`) whose run ended in an
    error, though the job itself succeeded: each table's result is in the outcome's value
    (runner/actions.py `_ingest_shared`)."""
    if not task.members or outcome.status != "success" or not isinstance(outcome.value, dict):
        return []
    return sorted(
        name for name, result in outcome.value.items() if isinstance(result, BaseException)
    )
