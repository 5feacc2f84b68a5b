"""Kafka messages -> RecordBatches that conform exactly to the table's Arrow schema.

`build_decoder(spec)` runs once per Spark task. Each message is decoded by the value (and
key) payload decoder into a row of Arrow storage values; rows are turned into one batch
with a single vectorised cast. A record that cannot be decoded, or whose values do not
fit the table's columns, becomes a DecodeFailure naming topic/partition/offset.

Rows are matched to the table by column name: columns the writer schema lacks (an older
writer) are null, writer fields the table lacks (a newer writer) are dropped; the planner
evolves the table before new fields are expected to land.

Tombstones (value None) carry no row: they are counted in `DecodeResult.tombstones`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from tableflow_core.schemas.arrow_values import TemporalAs, build_batch, storage_schema
from tableflow_core.schemas.formats import (
    METADATA_PREFIX,
    FormatSpec,
    metadata_column_name,
)
from tableflow_core.schemas.payloads import (
    PayloadDecoder,
    PayloadError,
    RegistryUnavailable,
    payload_decoder,
)
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import protobuf_message


class MessageLike(Protocol):
    """The fields of tableflow_core.kafka.messages.KafkaMessage this module reads."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp_ms(self) -> int | None: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> tuple[tuple[str, bytes | None], ...]: ...


def serialize_schema(schema: pa.Schema) -> bytes:
    """The `target_schema_ipc` form of an Arrow schema."""
    return bytes(schema.serialize().to_pybytes())


def deserialize_schema(data: bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(data))


@dataclass(frozen=True)
class DecoderSpec:
    topic: str
    value: FormatSpec
    key: FormatSpec | None
    metadata_columns: tuple[str, ...]
    registry: RegistrySettings | None
    target_schema_ipc: bytes  # pa.Schema serialized (serialize_schema)

    @property
    def target_schema(self) -> pa.Schema:
        return deserialize_schema(self.target_schema_ipc)


@dataclass(frozen=True)
class DecodeFailure:
    topic: str
    partition: int
    offset: int
    reason: str
    key: bytes | None
    value: bytes | None

    def describe(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}: {self.reason}"


@dataclass
class DecodeResult:
    batch: pa.RecordBatch  # conforms exactly to the target schema
    failures: list[DecodeFailure]
    tombstones: int = field(default=0)  # messages with a null value (no row)


class RecordDecoder(Protocol):
    def decode(self, messages: Sequence[MessageLike]) -> DecodeResult: ...


class DecodingError(RuntimeError):
    """Decoding cannot go on at all (e.g. the registry is down); names the record."""


def build_decoder(spec: DecoderSpec) -> RecordDecoder:
    return _Decoder(spec)


class _Decoder:
    def __init__(self, spec: DecoderSpec) -> None:
        self._spec = spec
        self._target = spec.target_schema
        self._values = payload_decoder(
            spec.value,
            spec.registry,
            as_columns=True,
            message=protobuf_message(self._target, "value"),
        )
        self._keys: PayloadDecoder | None = None
        metadata = set(spec.metadata_columns)
        if "key" in metadata:
            key_spec = spec.key or FormatSpec(format="bytes")
            self._keys = payload_decoder(
                key_spec,
                spec.registry,
                as_columns=False,
                message=protobuf_message(self._target, "key"),
            )
        self._metadata = metadata
        names = set(self._target.names)
        self._key_column = metadata_column_name("key") if "key" in metadata else None
        for column in spec.metadata_columns:
            if metadata_column_name(column) not in names:
                raise ValueError(
                    f"metadata column {metadata_column_name(column)} is not in the target schema"
                )
        temporal: dict[str, TemporalAs] = {
            name: self._values.temporal for name in names if not name.startswith(METADATA_PREFIX)
        }
        if self._keys is not None and self._key_column:
            temporal[self._key_column] = self._keys.temporal
        self._storage = storage_schema(self._target, temporal)

    def decode(self, messages: Sequence[MessageLike]) -> DecodeResult:
        rows: list[dict[str, Any]] = []
        sources: list[MessageLike] = []
        failures: list[DecodeFailure] = []
        tombstones = 0
        for message in messages:
            if message.value is None:
                tombstones += 1
                continue
            try:
                row = self._row(message)
            except PayloadError as exc:
                failures.append(_failure(message, exc.reason))
                continue
            except RegistryUnavailable as exc:
                raise DecodingError(
                    f"{message.topic}[{message.partition}]@{message.offset}: {exc}"
                ) from exc
            rows.append(row)
            sources.append(message)
        batch = self._batch(rows, sources, failures)
        failures.sort(key=lambda f: (f.partition, f.offset))
        return DecodeResult(batch=batch, failures=failures, tombstones=tombstones)

    def _row(self, message: MessageLike) -> dict[str, Any]:
        assert message.value is not None
        row: dict[str, Any] = self._values.decode(message.value)
        metadata = self._metadata
        if not metadata:
            return row
        if "topic" in metadata:
            row["_kafka_topic"] = message.topic
        if "partition" in metadata:
            row["_kafka_partition"] = message.partition
        if "offset" in metadata:
            row["_kafka_offset"] = message.offset
        if "timestamp" in metadata:
            ts = message.timestamp_ms
            row["_kafka_timestamp"] = None if ts is None or ts < 0 else ts * 1000
        if "headers" in metadata:
            row["_kafka_headers"] = list(message.headers) if message.headers else None
        if self._keys is not None:
            key = message.key
            try:
                row["_kafka_key"] = None if key is None else self._keys.decode(key)
            except PayloadError as exc:
                raise PayloadError(f"key: {exc.reason}") from exc
        return row

    def _batch(
        self,
        rows: list[dict[str, Any]],
        sources: list[MessageLike],
        failures: list[DecodeFailure],
    ) -> pa.RecordBatch:
        try:
            return build_batch(rows, self._storage, self._target)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
        # Some row does not fit the table: find it (rare path, one row at a time).
        good: list[dict[str, Any]] = []
        for row, message in zip(rows, sources, strict=True):
            try:
                build_batch([row], self._storage, self._target)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                failures.append(
                    _failure(
                        message, f"value does not fit the table schema: {type(exc).__name__}: {exc}"
                    )
                )
                continue
            good.append(row)
        return build_batch(good, self._storage, self._target)


def _failure(message: MessageLike, reason: str) -> DecodeFailure:
    return DecodeFailure(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        reason=reason,
        key=message.key,
        value=message.value,
    )
