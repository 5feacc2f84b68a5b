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
import resource
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


# Held lock files keep descriptors at or above this: FD_SETSIZE, the first descriptor
# select() cannot watch. An apply of 1,000 tables held 1,000 lock files on descriptors
# 3..1003, so the sockets opened after them (pyspark's accumulator server uses select)
# got numbers past 1023 and failed ("filedescriptor out of range in select()").
HIGH_FD_FLOOR = 1024


def _raise_open_file_limit(needed: int) -> None:
    """Raise the soft RLIMIT_NOFILE towards the hard one when it is below `needed`
    (a soft limit of 1,024, common on desktops, cannot hold 1,000 lock files besides
    the JVM gateway's and Kafka's sockets)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        wanted = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _move_high(handle: IO[str]) -> int:
    """A descriptor of the same open file (so the same flock) at HIGH_FD_FLOOR or above,
    the original closed; where the limit does not allow it, the original descriptor."""
    try:
        high = fcntl.fcntl(handle.fileno(), fcntl.F_DUPFD_CLOEXEC, HIGH_FD_FLOOR)
    except OSError:
        return os.dup(handle.fileno())
    return int(high)


def _release(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


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
    held: list[int] = []  # descriptors of the held lock files
    paths: list[Path] = []
    started = time.monotonic()
    wanted = sorted(set(tables))
    _raise_open_file_limit(HIGH_FD_FLOOR + len(wanted) + 1024)
    try:
        for table in wanted:
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
            try:
                held.append(_move_high(handle))
            finally:
                handle.close()  # the lock stays with the duplicate (same open file)
            paths.append(path)
        yield paths
    finally:
        for fd in reversed(held):
            _release(fd)
