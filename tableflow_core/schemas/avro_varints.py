"""Many framed Avro payloads that are each one zigzag varint, decoded at once (numpy).

An upsert table's Kafka keys are most often a registry-framed Avro record of one `long`
or `int` field (`{"id": 42}`, a Debezium key): 5 bytes of frame, then one varint. Read one
by one they cost the compiled reader's call per key (~0.3 us); here a chunk's keys are
joined and decoded column-wise. Each payload must be exactly the given frame followed by
one varint ending at the payload's last byte (continuation bits on every byte but the
last: this proves where each key ends), of at most `max_bytes` bytes and, for an `int`,
within 32 bits; otherwise the answer is None and the caller reads the keys one by one,
where a bad key is named.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Bytes of a varint: a long's 64 bits in 7-bit groups; an int's 32.
MAX_BYTES = {"long": 10, "int": 5}
_INT32 = (-(2**31), 2**31 - 1)


def zigzag_varints(payloads: Sequence[bytes], frame: bytes, kind: str) -> np.ndarray | None:
    """Each payload's value (int64), or None when one of them is not `frame` followed by
    exactly one varint of an Avro `kind` ("long" or "int")."""
    n = len(payloads)
    if n == 0:
        return None
    lengths = np.fromiter(map(len, payloads), np.int64, n)
    body = lengths - len(frame)
    width = int(body.max())
    if int(body.min()) < 1 or width > MAX_BYTES[kind]:
        return None
    data = np.frombuffer(b"".join(payloads), np.uint8)
    starts = np.cumsum(lengths) - lengths
    for i, byte in enumerate(frame):
        if (data[starts + i] != byte).any():
            return None
    place = np.arange(width)
    inside = place[None, :] < body[:, None]
    at = np.minimum(starts[:, None] + len(frame) + place[None, :], len(data) - 1)
    groups = np.where(inside, data[at], 0).astype(np.uint64)
    more = (groups & np.uint64(0x80)) != 0
    if not np.array_equal(more, place[None, :] < (body - 1)[:, None]):
        return None  # a varint ends before its payload does, or runs past it
    if width == 10 and bool((groups[:, 9] > 1).any()):
        return None  # more than 64 bits
    value = np.zeros(n, np.uint64)
    for k in range(width):
        value |= (groups[:, k] & np.uint64(0x7F)) << np.uint64(7 * k)
    decoded = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    if kind == "int" and bool(((decoded < _INT32[0]) | (decoded > _INT32[1])).any()):
        return None
    return decoded
