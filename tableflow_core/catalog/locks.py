"""Per-table locks: commits to one table are serialized inside the server process.

Across processes the database's compare-and-swap on `metadata_location` still
guarantees no lost update; the lock just turns most conflicts into waits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager

from pyiceberg.typedef import Identifier


class TableLocks:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Identifier, threading.Lock] = {}

    def _lock_for(self, identifier: Identifier) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(identifier, threading.Lock())

    @contextmanager
    def holding(self, identifiers: Iterable[Identifier]) -> Iterator[None]:
        """Hold the locks of all `identifiers`, taken in sorted order (no deadlock)."""
        with ExitStack() as stack:
            for identifier in sorted(set(identifiers)):
                stack.enter_context(self._lock_for(identifier))
            yield
