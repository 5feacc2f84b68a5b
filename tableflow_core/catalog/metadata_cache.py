"""Parsed table metadata, keyed by the metadata file's location.

Reading and parsing a metadata JSON file (every snapshot of the table's history) was
most of the catalog's work per commit and per load. Iceberg metadata files are
immutable and every commit writes a new file under a new name, so a location always
names the same metadata: the cache needs no invalidation. Which location is current
is still read from the database on every request (the database is the truth; other
server processes may commit to the same database), so a commit made elsewhere is seen
at once: its new location misses the cache and is read from disk.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from pyiceberg.table.metadata import TableMetadata

DEFAULT_MAX_ENTRIES = 128


class ParsedMetadata:
    """Table metadata and, once asked for, its JSON (what responses carry)."""

    __slots__ = ("_json", "metadata")

    def __init__(self, metadata: TableMetadata) -> None:
        self.metadata = metadata
        self._json: str | None = None

    def json(self) -> str:
        # Two threads may both serialize once: same result, no lock needed.
        if self._json is None:
            self._json = self.metadata.model_dump_json()
        return self._json


class MetadataCache:
    """A thread-safe LRU of parsed (and serialized) metadata by metadata location."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._max_entries = max_entries
        self._entries: OrderedDict[str, ParsedMetadata] = OrderedDict()
        self._guard = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, location: str, read: Callable[[str], TableMetadata]) -> ParsedMetadata:
        """The metadata at `location`, from the cache or else `read(location)`."""
        with self._guard:
            metadata = self._entries.get(location)
            if metadata is not None:
                self._entries.move_to_end(location)
                self.hits += 1
                return metadata
            self.misses += 1
        # Read outside the guard: a slow file must not stall other tables' requests.
        parsed = ParsedMetadata(read(location))
        self.put(location, parsed)
        return parsed

    def put(self, location: str, parsed: ParsedMetadata) -> None:
        with self._guard:
            self._entries[location] = parsed
            self._entries.move_to_end(location)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)

    def discard(self, location: str) -> None:
        with self._guard:
            self._entries.pop(location, None)

    def __len__(self) -> int:
        with self._guard:
            return len(self._entries)
