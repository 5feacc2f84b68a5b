"""The message record shipped from Kafka readers to decoders (picklable, immutable)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaMessage:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None  # None = tombstone
    headers: tuple[tuple[str, bytes | None], ...] = ()
