"""Files that snapshot expiry frees, deleted a grace period later, not at once.

A table refreshed every second keeps 100 snapshots by default (`history.py`): 100 s of
history. Iceberg's expiry deletes the files that only the expired snapshots used as soon
as it commits, so a reader still scanning a snapshot older than that (a Trino query of a
few minutes, a Spark job) found its files gone. Here expiry takes the snapshots out of
the metadata at once (what keeps metadata.json small) and hands the freed files to a list
instead: a file in the table's metadata folder, one path per line, named in the table
property `tableflow.expired-files` with the moment it may go (`keep_files_for` after the
expiry, 10 minutes by default). Every expiry run deletes the lists whose moment passed,
the files first. A list that is gone (removed as an orphan, say) is dropped: its files,
referenced by nothing, are orphans too and `remove_orphans` takes them.

Only paths under the table's own places (its location and `write.*.path` properties, as
the catalog confines them: `catalog/placement.py`) are ever deleted: the lists are read
back from storage, and a path outside them is counted and left.

Pure: the JVM side (Iceberg's FileIO) is `operations.expire_snapshots`'.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tableflow_core.catalog.locations import LocationPolicy

log = logging.getLogger(__name__)

PROPERTY = "tableflow.expired-files"
LIST_PREFIX = "tableflow-expired-files-"


@dataclass(frozen=True)
class PendingList:
    """A list of freed files, deleted once `delete_after_ms` (epoch ms) has passed."""

    location: str
    delete_after_ms: int


def parse_pending(raw: str | None) -> tuple[PendingList, ...]:
    """The lists a table property names; a value that is not ours is ignored (logged):
    its files are left to orphan removal rather than guessed at."""
    if not raw:
        return ()
    try:
        entries = json.loads(raw)
        return tuple(PendingList(str(e["list"]), int(e["after_ms"])) for e in entries)
    except (ValueError, TypeError, KeyError) as exc:
        log.warning("ignoring the table property %s: %s", PROPERTY, exc)
        return ()


def render_pending(lists: Iterable[PendingList]) -> str:
    return json.dumps(
        [{"list": p.location, "after_ms": p.delete_after_ms} for p in lists],
        separators=(",", ":"),
    )


def split_due(
    lists: Sequence[PendingList], now_ms: int
) -> tuple[tuple[PendingList, ...], tuple[PendingList, ...]]:
    """(lists whose files may go now, lists still kept)."""
    due = tuple(p for p in lists if p.delete_after_ms <= now_ms)
    return due, tuple(p for p in lists if p.delete_after_ms > now_ms)


def confined(paths: Iterable[str], policy: LocationPolicy) -> tuple[list[str], list[str]]:
    """(paths under the table's places, the others), each as written. A path the catalog
    cannot compare (`..`, another host, control characters) is outside."""
    inside: list[str] = []
    outside: list[str] = []
    for path in paths:
        (inside if policy.allows(path) else outside).append(path)
    return inside, outside


def list_text(paths: Iterable[str]) -> str:
    return "".join(f"{path}\n" for path in paths)


def list_paths(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]
