"""The Confluent wire format: magic byte 0, 4-byte big-endian schema id, then the payload.

Protobuf payloads start with the message-index path: a zigzag varint count followed by
that many zigzag varints; a single 0 byte is the shorthand for `[0]` (first message).
"""

from __future__ import annotations

from tableflow_core.errors import TableflowError

MAGIC_BYTE = 0
HEADER_SIZE = 5


class FramingError(TableflowError, ValueError):
    """The bytes are not a valid Confluent-framed record."""


def read_header(data: bytes) -> int:
    """Return the schema id of a Confluent-framed record (payload starts at HEADER_SIZE)."""
    if len(data) < HEADER_SIZE:
        raise FramingError(f"record is {len(data)} bytes, shorter than the 5-byte Confluent header")
    if data[0] != MAGIC_BYTE:
        raise FramingError(
            f"unknown magic byte {data[0]} (expected 0): not Confluent Schema Registry framing"
        )
    return int.from_bytes(data[1:HEADER_SIZE], "big", signed=False)


def _read_zigzag_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    value = 0
    while True:
        if pos >= len(data):
            raise FramingError("truncated varint in the Protobuf message-index header")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise FramingError("varint too long in the Protobuf message-index header")
    return (value >> 1) ^ -(value & 1), pos


def read_protobuf_message_indexes(data: bytes, pos: int) -> tuple[tuple[int, ...], int]:
    """Read the message-index path at `pos`; return (indexes, position after them)."""
    count, pos = _read_zigzag_varint(data, pos)
    if count == 0:
        return (0,), pos
    if count < 0 or count > 100:
        raise FramingError(f"invalid Protobuf message-index count {count}")
    indexes = []
    for _ in range(count):
        index, pos = _read_zigzag_varint(data, pos)
        indexes.append(index)
    return tuple(indexes), pos
