"""Progress of a running apply on the terminal (rich), fed by executor events."""

from __future__ import annotations

import threading
from types import TracebackType

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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.stop()

    def on_event(self, event: str, task: DagTask, outcome: TaskOutcome | None) -> None:
        with self._lock:
            if event == "start":
                self._running.add(task.id)
            else:
                self._running.discard(task.id)
                self._progress.advance(self._bar)
                if outcome is not None:
                    style = STATUS_STYLE[outcome.status]
                    extra = f": {outcome.error}" if outcome.error else ""
                    self._progress.console.print(
                        f"[{style}]{outcome.status:>7}[/] {task.id} ({outcome.duration_s:.1f}s){extra}",
                        highlight=False,
                    )
            shown = ", ".join(sorted(self._running)) or "waiting"
            self._progress.update(self._bar, description=f"running {shown}"[:80])
