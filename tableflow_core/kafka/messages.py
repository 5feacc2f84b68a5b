"""The messages shipped from Kafka readers to decoders (picklable, immutable).

`KafkaMessage` is one record. `MessageChunk` is what the range reader yields: a sequence of
KafkaMessages held as one list per field. Decoders work on the columns (the metadata
columns become Arrow arrays in one call each) and no Python object is built per message:
tens of thousands of small objects per chunk cost allocation and garbage-collector passes
that showed up as a third of the reading time. Iterating or indexing a chunk still gives
KafkaMessages, built on demand (bad records, dead-letter re-reads, tests).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

Headers = Sequence[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class KafkaMessage:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None  # None = tombstone
    headers: tuple[tuple[str, bytes | None], ...] = ()


class MessageChunk(Sequence[KafkaMessage]):
    """Messages as columns: element i of every list belongs to message i.

    `headers[i]` is None or a sequence of (key, value) pairs (empty means none), as the
    Kafka client hands them over; `timestamp_ms[i]` is None when the broker has none.
    The lists are owned by the chunk: callers must not change them.
    """

    __slots__ = ("headers", "keys", "offsets", "partitions", "timestamps_ms", "topics", "values")

    def __init__(
        self,
        topics: list[str],
        partitions: list[int],
        offsets: list[int],
        timestamps_ms: list[int | None],
        keys: list[bytes | None],
        values: list[bytes | None],
        headers: list[Headers | None],
    ) -> None:
        n = len(offsets)
        columns = (topics, partitions, timestamps_ms, keys, values, headers)
        if any(len(c) != n for c in columns):
            raise ValueError("the columns of a message chunk must have one entry per message")
        self.topics = topics
        self.partitions = partitions
        self.offsets = offsets
        self.timestamps_ms = timestamps_ms
        self.keys = keys
        self.values = values
        self.headers = headers

    @classmethod
    def of(cls, messages: Sequence[Any]) -> MessageChunk:
        """`messages` (KafkaMessage-like objects) as a chunk (itself when it already is one)."""
        if isinstance(messages, MessageChunk):
            return messages
        return cls(
            [m.topic for m in messages],
            [m.partition for m in messages],
            [m.offset for m in messages],
            [m.timestamp_ms for m in messages],
            [m.key for m in messages],
            [m.value for m in messages],
            [m.headers for m in messages],
        )

    def select(self, indexes: Sequence[int]) -> MessageChunk:
        """The messages at `indexes`, in that order."""
        return MessageChunk(
            [self.topics[i] for i in indexes],
            [self.partitions[i] for i in indexes],
            [self.offsets[i] for i in indexes],
            [self.timestamps_ms[i] for i in indexes],
            [self.keys[i] for i in indexes],
            [self.values[i] for i in indexes],
            [self.headers[i] for i in indexes],
        )

    def message(self, i: int) -> KafkaMessage:
        headers = self.headers[i]
        return KafkaMessage(
            self.topics[i],
            self.partitions[i],
            self.offsets[i],
            self.timestamps_ms[i],
            self.keys[i],
            self.values[i],
            tuple(headers) if headers else (),
        )

    def __len__(self) -> int:
        return len(self.offsets)

    @overload
    def __getitem__(self, index: int) -> KafkaMessage: ...
    @overload
    def __getitem__(self, index: slice) -> MessageChunk: ...
    def __getitem__(self, index: int | slice) -> KafkaMessage | MessageChunk:
        if isinstance(index, slice):
            return self.select(range(len(self.offsets))[index])
        return self.message(range(len(self.offsets))[index])

    def __iter__(self) -> Iterator[KafkaMessage]:
        return (self.message(i) for i in range(len(self.offsets)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]
