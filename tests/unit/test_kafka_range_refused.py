"""A planned range refused as out of range is asked for again before the read fails
(kafka/range_reader.py): a narrow test with a scripted consumer in place of librdkafka's."""

from __future__ import annotations

from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import KafkaError

from tableflow_core.kafka import range_reader
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.kafka.range_reader import KafkaReadError, read_range

TOPIC = "orders"


class Message:
    def __init__(self, offset: int, error: KafkaError | None = None) -> None:
        self._offset, self._error = offset, error

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_000 + self._offset)

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return f"v{self._offset}".encode()

    def headers(self) -> None:
        return None


REFUSED = KafkaError(KafkaError._AUTO_OFFSET_RESET, "Offset out of range")


class ScriptedConsumer:
    """Serves `log` from the assigned offset, refusing the first `refusals` fetches after
    one message (and serving that message again after the refusal, as a stale fetch)."""

    refusals = 0
    assigned: list[int] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        self.position_ = 0

    def assign(self, partitions: list[Any]) -> None:
        self.position_ = partitions[0].offset
        ScriptedConsumer.assigned.append(self.position_)

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        start = self.position_
        if ScriptedConsumer.refusals:
            ScriptedConsumer.refusals -= 1
            return [Message(start), Message(start + 1, REFUSED), Message(start + 1)]
        self.position_ = min(start + num_messages, 6)
        served = [Message(o) for o in range(max(0, start - 1), self.position_)]  # one stale
        return served or [Message(6, KafkaError(KafkaError._PARTITION_EOF))]

    def position(self, partitions: list[Any]) -> list[Any]:
        return [confluent_kafka.TopicPartition(TOPIC, 0, self.position_)]

    def close(self) -> None:
        pass


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> type[ScriptedConsumer]:
    monkeypatch.setattr(confluent_kafka, "Consumer", ScriptedConsumer)
    monkeypatch.setattr(range_reader.time, "sleep", lambda seconds: None)
    ScriptedConsumer.assigned = []
    return ScriptedConsumer


def offsets_read(refusals: int) -> list[int]:
    ScriptedConsumer.refusals = refusals
    chunks = read_range({"bootstrap.servers": "k:9092"}, OffsetRange(TOPIC, 0, 1, 6))
    return [o for chunk in chunks for o in chunk.offsets]


def test_a_refused_fetch_is_asked_again_and_every_offset_read_once(
    consumer: type[ScriptedConsumer],
) -> None:
    assert offsets_read(refusals=2) == [1, 2, 3, 4, 5]
    # From the range's start, then from the offset after the last one read, twice.
    assert consumer.assigned == [1, 2, 3]


def test_a_range_refused_every_time_fails_naming_it(consumer: type[ScriptedConsumer]) -> None:
    with pytest.raises(KafkaReadError, match=r"topic 'orders' partition 0 range \[1, 6\)"):
        offsets_read(refusals=range_reader.OUT_OF_RANGE_RETRIES + 1)
