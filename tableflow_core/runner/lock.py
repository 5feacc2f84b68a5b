"""Per-table apply locks: an OS file lock (flock) per table under `<project>/target/locks/`.

Why flock: the kernel releases it when the holding process dies (crash, kill -9,
power loss of the process), so a crashed apply never leaves a table locked and no
heartbeat or stale-pid guessing is needed. The lock file also holds who holds it
(pid, host, command, since) so a waiting apply can name the holder.

What it covers: applies started from the same project directory on the same host
(or on hosts sharing that directory over a file system with working flock). Applies
from other hosts or checkouts are not serialized by it; what keeps them correct is
the engine's commit check: an ingest commits only if the table's committed offsets
are still the ones it started from, so two concurrent runs can never write the same
records twice (the loser fails and retries on the next run).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from tableflow_core.errors import TableflowError
from tableflow_core.output_files import open_lock_file


class LockTimeoutError(TableflowError, RuntimeError):
    """Another apply holds one of the plan's tables for longer than the lock timeout."""

    changes_nothing = True

    def __init__(self, table: str, holder: dict[str, Any] | None, waited_s: float) -> None:
        self.table = table
        self.holder = holder
        who = (
            f"pid {holder.get('pid')} on {holder.get('host')} ({holder.get('command')}, since {holder.get('since')})"
            if holder
            else "another process"
        )
        super().__init__(
            f"table {table} is locked by {who}; waited {waited_s:.0f}s "
            "(raise --lock-timeout to wait longer)"
        )


def _lock_path(lock_dir: Path, table: str) -> Path:
    return lock_dir / f"{table}.lock"


def read_holder(path: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text() or "null")
        return data if isinstance(data, dict) else None
    return None


def _try_lock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


@contextlib.contextmanager
def table_locks(
    lock_dir: Path,
    tables: Sequence[str],
    timeout_s: float = 0.0,
    command: str = "tableflow apply",
    poll_s: float = 0.2,
    base: Path | None = None,
) -> Iterator[list[Path]]:
    """Hold the locks of `tables` (taken in name order, so two applies cannot deadlock).

    No symbolic link from `base` (e.g. the project root; default `lock_dir`) down to a
    lock file is followed (`output_files`)."""
    held: list[IO[str]] = []
    paths: list[Path] = []
    started = time.monotonic()
    try:
        for table in sorted(set(tables)):
            path = _lock_path(lock_dir, table)
            handle: IO[str] = open_lock_file(path, base or lock_dir)  # kept while held
            while not _try_lock(handle):
                if time.monotonic() - started >= timeout_s:
                    handle.close()
                    raise LockTimeoutError(table, read_holder(path), time.monotonic() - started)
                time.sleep(poll_s)
            handle.seek(0)
            handle.truncate()
            handle.write(
                json.dumps(
                    {
                        "pid": os.getpid(),
                        "host": socket.gethostname(),
                        "command": command,
                        "since": datetime.now(UTC).isoformat(timespec="seconds"),
                    }
                )
            )
            handle.flush()
            held.append(handle)
            paths.append(path)
        yield paths
    finally:
        for handle in reversed(held):
            with contextlib.suppress(OSError):
                handle.seek(0)
                handle.truncate()
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            handle.close()
