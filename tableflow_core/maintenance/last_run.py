"""When each maintenance operation last ran: table properties `tableflow.maintenance.<op>.last-run`.

Why table properties (and not a local state file): they travel with the table, so
any machine running `tableflow maintain` or `plan` sees the same schedule, a
restored or re-cloned project does not re-run everything, and nothing else has to
be kept in sync. The cost is one small metadata commit per maintenance run (no
snapshot, so `main` and the committed offsets do not move).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

PROPERTY_PREFIX = "tableflow.maintenance."
PROPERTY_SUFFIX = ".last-run"


def last_run_property(operation: str) -> str:
    return f"{PROPERTY_PREFIX}{operation}{PROPERTY_SUFFIX}"


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def last_runs(properties: Mapping[str, str]) -> dict[str, datetime]:
    """Operation -> last run, from table properties (unreadable values count as never)."""
    found: dict[str, datetime] = {}
    for key, value in properties.items():
        if key.startswith(PROPERTY_PREFIX) and key.endswith(PROPERTY_SUFFIX):
            operation = key[len(PROPERTY_PREFIX) : -len(PROPERTY_SUFFIX)]
            try:
                moment = datetime.fromisoformat(value)
            except ValueError:
                continue
            found[operation] = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return found


def last_run_properties(operations: Iterable[str], moment: datetime) -> dict[str, str]:
    return {last_run_property(op): format_time(moment) for op in operations}
