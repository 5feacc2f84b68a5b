"""`--log-format json` (run, apply, maintain): one JSON object per line on stdout.

Each line has `time` (ISO-8601 UTC), `level` (info, warning, error), `command`, `event`,
`table` (null for what concerns no one table) and the event's figures, the same as the
console prints (docs/observability.md lists the events). Every text goes through the
project's redaction, as the console's does; texts are the console's texts, so no clear
value of a masked column reaches one (tests/integration/test_masked_values_nowhere.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tableflow_core.maintenance.report import OperationResult
    from tableflow_core.runner.results import RunResults, TableResult

LOG_FORMATS = ("console", "json")
LEVEL_OF_STATUS = {"success": "info", "no_changes": "info", "skipped": "warning", "error": "error"}


class EventLog:
    def __init__(
        self,
        command: str,
        stream: IO[str] | None = None,
        redact: Callable[[str], str] = lambda text: text,
    ) -> None:
        self.command = command
        self.stream = stream if stream is not None else sys.stdout
        self.redact = redact

    def emit(
        self, event: str, *, level: str = "info", table: str | None = None, **fields: Any
    ) -> None:
        line = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": level,
            "command": self.command,
            "event": event,
            "table": table,
            **{k: self._clean(v) for k, v in fields.items()},
        }
        self.stream.write(json.dumps(line, default=str) + "\n")
        self.stream.flush()

    def _clean(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {str(k): self._clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._clean(v) for v in value]
        return value


def table_result_fields(result: TableResult) -> dict[str, Any]:
    """A table's apply result as an event's fields (run_results.json's figures)."""
    totals = (result.accounting or {}).get("totals") or {}
    return {
        "status": result.status,
        "records_read": result.records_read,
        "records_written": result.records_written,
        "records_filtered": int(totals.get("filtered", 0)),
        "records_tombstones": int(totals.get("tombstones", 0)),
        "records_dead_lettered": result.records_dead_lettered,
        "records_skipped": result.records_skipped,
        "records_lost": result.records_lost,
        "offsets_before": result.offsets_before,
        "offsets_after": result.offsets_after,
        "snapshot_id": result.snapshot_id,
        "duration_s": result.duration_s,
        "error": result.error,
        "published": list(result.published),
        "delta_version": result.delta_version,
    }


def emit_results(log: EventLog, results: RunResults) -> None:
    """Per table its result and warnings, then the apply's summary."""
    for result in results.tables:
        log.emit(
            "table_result",
            level=LEVEL_OF_STATUS[result.status],
            table=result.table,
            **table_result_fields(result),
        )
        for warning in result.warnings:
            log.emit("warning", level="warning", table=result.table, message=warning)
    figures: dict[str, Any] = {
        "status": results.status,
        "duration_s": results.duration_s,
        "summary": results.summary_line(),
        **results.summary_counts(),
    }
    log.emit("apply_finished", level="info" if results.status == "success" else "error", **figures)


def operation_fields(op: OperationResult) -> dict[str, Any]:
    return {
        "operation": op.operation,
        "status": op.status,
        "duration_s": op.duration_s,
        "metrics": dict(op.metrics),
        "error": op.error,
    }
