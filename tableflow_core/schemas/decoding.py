"""Kafka messages -> RecordBatches that conform exactly to the table's Arrow schema.

`build_decoder(spec)` runs once per Spark task. Each message's value is read by the
payload decoder's `tuple_reader` into the values of the table's value columns (flat Avro
records by a reader compiled per writer schema, `avro_records`); the `_kafka_*` metadata
columns come from the chunk's columns (`kafka.messages.MessageChunk`), one Arrow array
each, never per record. One vectorised cast turns the storage values into the table's
types. A record that cannot be decoded, or whose values do not fit the table's columns,
becomes a DecodeFailure naming topic/partition/offset.

Rows are matched to the table by column name: columns the writer schema lacks (an older
writer) are null, writer fields the table lacks (a newer writer) are dropped; the planner
evolves the table before new fields are expected to land.

Tombstones (value None) carry no row: they are counted in `DecodeResult.tombstones`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from tableflow_core.config.models.tables import CDC_METADATA_COLUMNS
from tableflow_core.errors import TableflowError
from tableflow_core.kafka.messages import MessageChunk
from tableflow_core.schemas import debezium
from tableflow_core.schemas.arrow_values import TemporalAs, storage_schema
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
    # Columns a mask of the table hides: a failure's reason never quotes their values.
    masked_columns: frozenset[str] = frozenset()

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
    # Conforms exactly to the target schema (a change stream's: then debezium.OP_COLUMN).
    batch: pa.RecordBatch
    failures: list[DecodeFailure]
    tombstones: int = field(default=0)  # messages with a null value (no row)


class RecordDecoder(Protocol):
    def decode(self, messages: Sequence[MessageLike]) -> DecodeResult: ...


class DecodingError(TableflowError, RuntimeError):
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
            table={
                f.name: f.type
                for f in self._target
                if not f.name.startswith(METADATA_PREFIX) and f.name not in debezium.EVENT_COLUMNS
            },
        )
        if spec.value.envelope == "debezium":
            # Change events: each row is the event's image, its operation in a hidden column
            # after the table's (schemas/debezium.py).
            self._values = debezium.DebeziumPayloadDecoder(self._values)
            self._target = self._target.append(pa.field(debezium.OP_COLUMN, pa.string()))
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
        names = set(self._target.names)
        for column in spec.metadata_columns:
            if metadata_column_name(column) not in names:
                raise ValueError(
                    f"metadata column {metadata_column_name(column)} is not in the target schema"
                )
        temporal: dict[str, TemporalAs] = {
            name: self._values.temporal
            for name in names
            if not name.startswith(METADATA_PREFIX) and name not in debezium.EVENT_COLUMNS
        }
        key_column = metadata_column_name("key")
        if self._keys is not None:
            temporal[key_column] = self._keys.temporal
        self._storage = storage_schema(self._target, temporal)
        # Value columns come from the payload rows; metadata columns from the chunk's columns.
        by_name = {metadata_column_name(c): c for c in metadata if c not in CDC_METADATA_COLUMNS}
        self._sources: list[str | None] = [by_name.get(f.name) for f in self._storage]
        self._value_storage = pa.schema(
            [f for f, source in zip(self._storage, self._sources, strict=True) if source is None]
        )
        self._read_value = self._values.tuple_reader(self._value_storage.names)
        # Flat Avro records of one schema id: a chunk read at once, field by field
        # (schemas/avro_columns.py), when no key column is decoded with them.
        columns_reader = getattr(self._values, "columns_reader", None)
        self._read_columns = (
            columns_reader(self._value_storage.names, self._value_storage.types)
            if columns_reader is not None and self._keys is None
            else None
        )

    def decode(self, messages: Sequence[MessageLike]) -> DecodeResult:
        chunk = MessageChunk.of(messages)
        at_once = self._decode_at_once(chunk)
        if at_once is not None:
            return at_once
        values = chunk.values
        read_value = self._read_value
        flat: list[Any] = []  # the value columns' values, one row after the other
        extend = flat.extend
        start = 0
        if self._keys is None:
            # Hot path: no bookkeeping per record until a tombstone or a failure.
            try:
                for value in values:
                    if value is None:
                        break
                    extend(read_value(value))
                    start += 1
            except Exception:
                pass  # the loop below reads this record again and says what is wrong
        kept = list(range(start))  # chunk index of each row
        keys = self._keys
        chunk_keys = chunk.keys
        decoded_keys: list[Any] = []
        failures: list[DecodeFailure] = []
        tombstones = 0
        for i in range(start, len(values)):
            value = values[i]
            if value is None:
                tombstones += 1
                continue
            try:
                row = read_value(value)
                if keys is not None:
                    key = chunk_keys[i]
                    try:
                        decoded_keys.append(None if key is None else keys.decode(key))
                    except PayloadError as exc:
                        raise PayloadError(f"key: {exc.reason}") from exc
            except PayloadError as exc:
                failures.append(_failure(chunk, i, exc.reason))
                continue
            except RegistryUnavailable as exc:
                raise DecodingError(
                    f"{chunk.topics[i]}[{chunk.partitions[i]}]@{chunk.offsets[i]}: {exc}"
                ) from exc
            extend(row)
            kept.append(i)
        batch = self._batch(flat, decoded_keys, kept, chunk, failures)
        failures.sort(key=lambda f: (f.partition, f.offset))
        return DecodeResult(batch=batch, failures=failures, tombstones=tombstones)

    def _decode_at_once(self, chunk: MessageChunk) -> DecodeResult | None:
        """The chunk's records read at once (`_read_columns`); None when that reader does
        not prove every one of them clean, or there is none."""
        if self._read_columns is None:
            return None
        values = chunk.values
        kept = [i for i, value in enumerate(values) if value is not None]
        if not kept:
            return None
        whole = len(kept) == len(values)
        arrays = self._read_columns(values if whole else [values[i] for i in kept])
        if arrays is None:
            return None
        try:
            batch = self._assemble(arrays, [], chunk if whole else chunk.select(kept))
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None  # a value the table's type refuses: named record by record
        return DecodeResult(batch=batch, failures=[], tombstones=len(values) - len(kept))

    def _build(self, flat: list[Any], keys: list[Any], chunk: MessageChunk) -> pa.RecordBatch:
        """The batch of the rows in `flat` (values of the value columns, row after row) with
        the metadata of `chunk` (their messages)."""
        width = len(self._value_storage)
        arrays = [
            pa.array(flat[column::width], storage.type)
            for column, storage in enumerate(self._value_storage)
        ]
        return self._assemble(arrays, keys, chunk)

    def _assemble(
        self, value_arrays: list[pa.Array], keys: list[Any], chunk: MessageChunk
    ) -> pa.RecordBatch:
        """The batch of the value columns' arrays with the metadata of `chunk` (their
        messages)."""
        arrays = []
        values = iter(value_arrays)
        for target_field, source in zip(self._storage, self._sources, strict=True):
            if source is None:
                arrays.append(next(values))
            elif source == "key":
                arrays.append(pa.array(keys, target_field.type))
            else:
                arrays.append(pa.array(_METADATA_VALUES[source](chunk), target_field.type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self._storage)
        if self._storage.equals(self._target):
            return batch
        return batch.cast(self._target)

    def _batch(
        self,
        flat: list[Any],
        keys: list[Any],
        kept: list[int],
        chunk: MessageChunk,
        failures: list[DecodeFailure],
    ) -> pa.RecordBatch:
        rows = chunk if len(kept) == len(chunk) else chunk.select(kept)
        try:
            return self._build(flat, keys, rows)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
        # Some row does not fit the table: find it (rare path, one row at a time).
        width = len(self._value_storage)
        has_keys = self._keys is not None
        good: list[int] = []
        for j, i in enumerate(kept):
            row = flat[j * width : (j + 1) * width]
            try:
                self._build(row, keys[j : j + 1] if has_keys else [], chunk.select([i]))
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                reason = f"value does not fit the table schema: {self._misfit(row, exc)}"
                failures.append(_failure(chunk, i, reason))
                continue
            good.append(j)
        return self._build(
            [v for j in good for v in flat[j * width : (j + 1) * width]],
            [keys[j] for j in good] if has_keys else [],
            chunk.select([kept[j] for j in good]),
        )

    def _misfit(self, row: Sequence[Any], error: Exception) -> str:
        """Why one row's value columns do not fit: the first column that does not, named,
        with Arrow's reason; a masked column's value is never quoted (Arrow quotes it)."""
        for field_, value in zip(self._value_storage, row, strict=True):
            target = self._target.field(field_.name).type
            try:
                array = pa.array([value], field_.type)
                if not field_.type.equals(target):
                    array.cast(target)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                if field_.name in self._spec.masked_columns:
                    return (
                        f"field {field_.name!r} ({target}): a {type(value).__name__} value that "
                        "does not fit (a masked column: its value is not shown)"
                    )
                return f"field {field_.name!r} ({target}): {type(exc).__name__}: {exc}"
        if self._spec.masked_columns:  # not one column alone: say nothing of the values
            return f"{type(error).__name__} (the table masks columns: values not shown)"
        return f"{type(error).__name__}: {error}"


def _timestamps_us(chunk: MessageChunk) -> list[int | None]:
    return [None if ts is None or ts < 0 else ts * 1000 for ts in chunk.timestamps_ms]


def _headers(chunk: MessageChunk) -> list[list[tuple[str, bytes | None]] | None]:
    return [list(h) if h else None for h in chunk.headers]


# Metadata column -> its values for every message of a chunk (Arrow storage values).
_METADATA_VALUES: dict[str, Callable[[MessageChunk], Sequence[Any]]] = {
    "topic": lambda chunk: chunk.topics,
    "partition": lambda chunk: chunk.partitions,
    "offset": lambda chunk: chunk.offsets,
    "timestamp": _timestamps_us,
    "headers": _headers,
}


def _failure(chunk: MessageChunk, i: int, reason: str) -> DecodeFailure:
    return DecodeFailure(
        topic=chunk.topics[i],
        partition=chunk.partitions[i],
        offset=chunk.offsets[i],
        reason=reason,
        key=chunk.keys[i],
        value=chunk.values[i],
    )
