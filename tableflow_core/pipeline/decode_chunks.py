"""Inside a Spark task: one chunk of Kafka messages -> Arrow batches of the decode output.

Good rows, tombstones (null values: the key columns on upsert tables, all NULL on append
tables, where the decode stage counts and drops them) and bad records all travel as rows
of `columns.decoded_schema`: the table's columns, `__tf_partition`, `__tf_offset`,
`__tf_tombstone` and the `__tf_bad` struct, null on good rows. Nothing about a bad record
travels as exception text.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tableflow_core.ingest.columns import BAD_RECORD_STRUCT, decoded_schema
from tableflow_core.kafka.messages import KafkaMessage, MessageChunk
from tableflow_core.pipeline.key_values import key_row_fitter
from tableflow_core.schemas.arrow_values import build_batch, storage_schema
from tableflow_core.schemas.avro_varints import zigzag_varints
from tableflow_core.schemas.debezium import DELETE, OP_COLUMN
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.payloads import PayloadError, payload_decoder
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.wire_format import HEADER_SIZE
from tableflow_core.transforms.arrow_masks import DecodeMasks

VALUE_COLUMN = "value"  # the one column of a primitive payload decoded as columns


def _rows_at(keys: pa.RecordBatch | None, indexes: list[int]) -> pa.RecordBatch | None:
    """The rows of a chunk's key columns at these chunk indexes (in order, each once)."""
    if keys is None or len(indexes) == keys.num_rows:
        return keys
    return keys.take(pa.array(indexes, pa.int64()))


@dataclass(frozen=True)
class KeySpec:
    """Upsert: how a Kafka key becomes the key columns' values."""

    format: FormatSpec
    columns: tuple[str, ...]
    registry: RegistrySettings | None


@dataclass(frozen=True)
class _Bad:
    index: int  # in the chunk
    error_class: str
    reason: str


# Reading allocates a few garbage-collected objects per record (the client's messages, the
# timestamp tuples) that die within their batch. With the default first-generation
# threshold (700) the collector traverses each of them once or twice: 0.5 us per record,
# a tenth of the whole read + decode. Cycles (exceptions of bad records) are still found.
GC_THRESHOLD_WHILE_DECODING = 10_000


@contextmanager
def fewer_gc_passes(threshold: int = GC_THRESHOLD_WHILE_DECODING) -> Iterator[None]:
    """Run the block with the collector's first-generation threshold raised to `threshold`
    (for the one task a Spark Python worker runs at a time); restored afterwards."""
    previous = gc.get_threshold()
    gc.set_threshold(max(threshold, previous[0]), *previous[1:])
    try:
        yield
    finally:
        gc.set_threshold(*previous)


def _known_timestamps(timestamps_ms: Sequence[int | None]) -> pa.Array:
    """The records' timestamps (ms), null where the broker has none (None, or negative:
    -1 is "no timestamp")."""
    stamps = pa.array(timestamps_ms, pa.int64())
    lowest = pc.min(stamps).as_py()  # None: no row has one
    if lowest is None or lowest >= 0:
        return stamps
    return pc.if_else(pc.less(stamps, 0), pa.scalar(None, pa.int64()), stamps)


def _shown(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ChunkDecoder:
    def __init__(
        self,
        decoder: Any,
        table_schema: pa.Schema,
        key: KeySpec | None,
        run_id: str,
        masks: DecodeMasks | None = None,
        masked: frozenset[str] = frozenset(),
    ) -> None:
        self._decoder = decoder
        # Columns a mask of the table hides: a bad record's reason never quotes them.
        self._masked = masked
        # Masks run on the good rows' columns here, before Spark sees them
        # (transforms/decode_masks.py); never on key columns.
        self._masks = masks or DecodeMasks()
        self._table = table_schema
        self._out = decoded_schema(table_schema, upsert=key is not None)
        self._key = key
        self._run_id = run_id
        if key is not None:
            self._keys = payload_decoder(key.format, key.registry, as_columns=True)
            self._key_schema = pa.schema([table_schema.field(c) for c in key.columns])
            self._key_storage = storage_schema(
                self._key_schema, dict.fromkeys(key.columns, self._keys.temporal)
            )
            self._fit_key = key_row_fitter(self._key_storage, self._key_schema, masked)
            # A flat record key read straight into the key columns' values (a compiled
            # reader that skips the header parse for a run of one schema id), not decoded
            # to a dict first: a one-field Avro key added 2.6 us per record, now 1.7 us.
            # Off for the rest of the task once a valid key needs the decoded path (a
            # primitive key fills the one key column).
            self._read_key = self._keys.tuple_reader(key.columns)
            self._fast_keys = True
            # An Avro key decoder says which frames' keys are one varint each
            # (`_varint_keys`); frame -> "long"/"int", or None.
            self._varint_record = getattr(self._keys, "varint_record", None)
            self._varint_kinds: dict[bytes, str | None] = {}

    @property
    def output_schema(self) -> pa.Schema:
        return self._out

    def decode(self, messages: Sequence[KafkaMessage]) -> Iterator[pa.RecordBatch]:
        chunk = MessageChunk.of(messages)
        bad: list[_Bad] = []
        # Upsert: the key columns, a row per message (a key that cannot be read: a bad
        # record, its row null and never taken).
        keys = None
        if self._key is not None:
            keys = self._key_columns(chunk)
            if keys is None:
                keys = self._key_rows(chunk, bad)
        valued = [i for i, value in enumerate(chunk.values) if value is not None]
        tombstones: list[int] = []
        if len(valued) < len(chunk):
            tombstones = [i for i, value in enumerate(chunk.values) if value is None]
        if bad:  # records whose key could not be read go no further
            skipped = {b.index for b in bad}
            valued = [i for i in valued if i not in skipped]
            tombstones = [i for i in tombstones if i not in skipped]
        valued_chunk = chunk if len(valued) == len(chunk) else chunk.select(valued)
        result = self._decoder.decode(valued_chunk)
        good = valued
        if result.failures:
            # Rare path: map failures back to chunk indexes by position.
            index_of = {(chunk.partitions[i], chunk.offsets[i]): i for i in valued}
            failed = {(f.partition, f.offset): f.reason for f in result.failures}
            for position, reason in sorted(failed.items()):
                bad.append(_Bad(index_of[position], "DecodeError", reason))
            good = [i for i in valued if (chunk.partitions[i], chunk.offsets[i]) not in failed]
        if len(good) != result.batch.num_rows:
            raise AssertionError("decoder output does not line up with its input messages")
        batch = result.batch
        good_keys = _rows_at(keys, good)
        if good and good_keys is not None:
            batch, good, good_keys = self._agreeing_keys(batch, good, good_keys, bad)
        if good:
            # No record failed: the valued ones, selected once (good is a subset of them).
            good_chunk = valued_chunk if len(good) == len(valued) else chunk.select(good)
            yield self._good(batch, good_chunk, good_keys)
        if tombstones:
            yield self._tombstones(chunk.select(tombstones), _rows_at(keys, tombstones))
        if bad:
            yield self._bad(chunk, bad)

    def _key_columns(self, chunk: MessageChunk) -> pa.RecordBatch | None:
        """Upsert, the common case: every record's key read by the compiled reader straight
        into the key columns, column by column, its values already of the key columns'
        storage types (an integer column narrower than the key's long: checked by a safe
        cast). None when any key needs the row by row path (`_key_rows`: none, corrupt, a
        primitive or text key, a missing value, a value to convert or that does not fit):
        that path checks every row and names the bad ones."""
        assert self._key is not None
        if not self._fast_keys:
            return None
        read = self._read_key
        width = len(self._key.columns)
        found = self._varint_keys(chunk.keys) if width == 1 else None
        if found is not None:
            read_columns = [pa.array(found)]
        else:
            flat: list[Any] = []
            extend = flat.extend
            try:
                for key in chunk.keys:
                    if key is None:
                        return None
                    extend(read(key))
            except PayloadError:
                return None
            # the values' own types: a bool is no integer
            read_columns = [pa.array(flat[j::width]) for j in range(width)]
        arrays = []
        try:
            for column, storage in zip(read_columns, self._key_storage, strict=True):
                if column.null_count:
                    return None  # a key without a value for a key column: a bad record
                integers = pa.types.is_integer(column.type) and pa.types.is_integer(storage.type)
                if len(column) and column.type != storage.type and not integers:
                    return None  # text, a bool, a float...: converted or refused row by row
                # Safe: raises for an integer out of the column's range.
                arrays.append(column.cast(storage.type))
            batch = pa.RecordBatch.from_arrays(arrays, schema=self._key_storage)
            return (
                batch
                if self._key_storage.equals(self._key_schema)
                else batch.cast(self._key_schema)
            )
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None

    def _varint_keys(self, keys: list[bytes | None]) -> np.ndarray | None:
        """A chunk's keys read at once when each is a registry-framed Avro record of the
        one key column as a long or an int, all of one schema id (`avro_varints`); None
        for any other chunk (read key by key)."""
        first = keys[0] if keys else None
        if first is None or self._varint_record is None or None in keys:
            return None
        frame = first[:HEADER_SIZE]
        if frame not in self._varint_kinds:
            assert self._key is not None
            self._varint_kinds[frame] = self._varint_record(first, self._key.columns[0])
        kind = self._varint_kinds[frame]
        if kind is None:
            return None
        return zigzag_varints(cast(list[bytes], keys), frame, kind)

    def _key_rows(self, chunk: MessageChunk, bad: list[_Bad]) -> pa.RecordBatch:
        """Upsert, one key at a time: each key decoded and checked against the key columns;
        a key that cannot fill them makes its record a bad record (added to `bad`), its
        row null."""
        rows: list[dict[str, Any]] = []
        for i, key in enumerate(chunk.keys):
            try:
                rows.append(self._key_row(key))
            except PayloadError as exc:
                bad.append(_Bad(i, "KeyDecodeError", f"key: {exc.reason}"))
                rows.append({})
        return self._key_arrays(rows)

    def _agreeing_keys(
        self, batch: pa.RecordBatch, good: list[int], key_batch: pa.RecordBatch, bad: list[_Bad]
    ) -> tuple[pa.RecordBatch, list[int], pa.RecordBatch]:
        """Upsert: the rows whose value carries no key column, or the record key's values
        in it. A row stored under another key than its record's could never be deleted by
        a tombstone of that key (an orphan row): it is a bad record (`KeyMismatchError`),
        routed by on_error like any other. Returns the batch, chunk indexes and keys kept."""
        assert self._key is not None
        differs = np.zeros(batch.num_rows, dtype=bool)
        reasons: dict[int, str] = {}
        for name in self._key.columns:
            value = batch.column(self._table.get_field_index(name))
            key = key_batch.column(name)
            if value.null_count == len(value):
                continue  # the value lacks the column: the key fills it
            unequal = pc.fill_null(pc.not_equal(value, key), False).to_numpy(zero_copy_only=False)
            for row in np.flatnonzero(unequal & ~differs):
                reasons[int(row)] = self._mismatch(name, value[row].as_py(), key[row].as_py())
            differs |= unequal
        if not differs.any():
            return batch, good, key_batch
        kept = np.flatnonzero(~differs)
        for index, reason in sorted(reasons.items()):
            bad.append(_Bad(good[index], "KeyMismatchError", reason))
        return (
            batch.take(pa.array(kept)),
            [good[j] for j in kept],
            key_batch.take(pa.array(kept)),
        )

    def _mismatch(self, column: str, in_value: Any, in_key: Any) -> str:
        values = (
            "(a masked column: values not shown)"
            if column in self._masked
            else f"({_shown(in_value)} in the value, {_shown(in_key)} in the key)"
        )
        return (
            f"key column {column!r} differs between the value and the record's Kafka key "
            f"{values}: a row stored under the value's key could never be deleted by a "
            "tombstone of the record's key"
        )

    def _key_row(self, key: bytes | None) -> dict[str, Any]:
        assert self._key is not None
        if key is not None and self._fast_keys:
            try:
                values = self._read_key(key)
            except PayloadError:
                values = None  # a bad key: `_decoded_key_row` says why
            if values is not None and None not in values:
                return self._fit_key(dict(zip(self._key.columns, values, strict=True)))
            row = self._decoded_key_row(key)
            self._fast_keys = False
            return row
        return self._decoded_key_row(key)

    def _decoded_key_row(self, key: bytes | None) -> dict[str, Any]:
        assert self._key is not None
        if key is None:
            raise PayloadError("an upsert record needs a key; this one has none")
        decoded = self._keys.decode(key)
        columns = self._key.columns
        if set(decoded) == {VALUE_COLUMN} and VALUE_COLUMN not in columns:
            if len(columns) != 1:
                raise PayloadError(f"a primitive key fills one key column, not {list(columns)}")
            decoded = {columns[0]: decoded[VALUE_COLUMN]}
        missing = [c for c in columns if decoded.get(c) is None]
        if missing:
            raise PayloadError(f"key has no value for key column(s) {missing}")
        return self._fit_key({c: decoded[c] for c in columns})  # PayloadError: a bad record

    def _key_arrays(self, rows: list[dict[str, Any]]) -> pa.RecordBatch:
        try:
            return build_batch(rows, self._key_storage, self._key_schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            if self._masked & set(self._key_schema.names):
                raise PayloadError(
                    f"key does not fit the key columns: {type(exc).__name__} (a key column "
                    "is masked: values not shown)"
                ) from exc
            raise PayloadError(f"key does not fit the key columns: {exc}") from exc

    def _positions(self, chunk: MessageChunk, tombstone: bool | pa.Array) -> list[pa.Array]:
        flags = (
            pa.array([tombstone] * len(chunk), pa.bool_())
            if isinstance(tombstone, bool)
            else tombstone
        )
        arrays = [
            pa.array(chunk.partitions, pa.int32()),
            pa.array(chunk.offsets, pa.int64()),
            flags,
        ]
        if self._key is not None:  # upsert: the timestamp orders a key's records first
            arrays.append(_known_timestamps(chunk.timestamps_ms))
        return arrays

    def _good(
        self, batch: pa.RecordBatch, chunk: MessageChunk, key_batch: pa.RecordBatch | None
    ) -> pa.RecordBatch:
        columns = list(batch.columns)
        deletes: bool | pa.Array = False
        if batch.schema.names[-1] == OP_COLUMN:
            # Change events: a delete's row is its key's delete on a mirror (a tombstone
            # with the event's source position); the changelog keeps it as a row.
            ops = columns.pop()
            if self._key is not None:
                deletes = pc.fill_null(pc.equal(ops, DELETE), False)
        if self._key is not None:
            assert key_batch is not None
            # The value wins: a key column comes from the key only where the value has none.
            for name in self._key.columns:
                index = self._table.get_field_index(name)
                columns[index] = pc.coalesce(columns[index], key_batch.column(name))
        if self._masks:
            columns = self._masks.apply(self._table, columns)
        n = len(chunk)
        arrays = [*columns, *self._positions(chunk, deletes), pa.nulls(n, BAD_RECORD_STRUCT)]
        return pa.RecordBatch.from_arrays(arrays, schema=self._out)

    def _tombstones(self, chunk: MessageChunk, key_batch: pa.RecordBatch | None) -> pa.RecordBatch:
        """Upsert: the key columns of each tombstone (the write deletes by them). Append: a
        row of NULLs, counted by the decode stage and never written."""
        n = len(chunk)
        if key_batch is None:
            columns = [pa.nulls(n, f.type) for f in self._table]
        else:
            columns = [
                key_batch.column(f.name)
                if f.name in key_batch.schema.names
                else pa.nulls(n, f.type)
                for f in self._table
            ]
        arrays = [*columns, *self._positions(chunk, True), pa.nulls(n, BAD_RECORD_STRUCT)]
        return pa.RecordBatch.from_arrays(arrays, schema=self._out)

    def _bad(self, chunk: MessageChunk, bad: Sequence[_Bad]) -> pa.RecordBatch:
        now = datetime.now(UTC)
        messages = [chunk.message(b.index) for b in bad]
        records = [
            {
                "source_topic": m.topic,
                "source_partition": m.partition,
                "source_offset": m.offset,
                "source_timestamp": (
                    None
                    if m.timestamp_ms is None or m.timestamp_ms < 0
                    else datetime.fromtimestamp(m.timestamp_ms / 1000, UTC)
                ),
                "key": m.key,
                "value": m.value,
                "headers": [{"key": k, "value": v} for k, v in m.headers] or None,
                "stage": "decode",
                "error_class": b.error_class,
                "error_message": b.reason,
                "run_id": self._run_id,
                "failed_at": now,
            }
            for m, b in zip(messages, bad, strict=True)
        ]
        n = len(bad)
        columns = [pa.nulls(n, f.type) for f in self._table]
        struct = pa.array(records, BAD_RECORD_STRUCT)
        positions = self._positions(chunk.select([b.index for b in bad]), False)
        return pa.RecordBatch.from_arrays([*columns, *positions, struct], schema=self._out)
