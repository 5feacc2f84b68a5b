"""Inside a Spark task: one chunk of Kafka messages -> Arrow batches of the decode output.

Good rows, upsert tombstones (key columns only) and bad records all travel as rows of
`columns.decoded_schema`: the table's columns, `__tf_partition`, `__tf_offset`
(`__tf_tombstone` for upsert) and the `__tf_bad` struct, null on good rows. Nothing about
a bad record travels as exception text.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tableflow_core.kafka.messages import KafkaMessage
from tableflow_core.pipeline.columns import BAD_RECORD_STRUCT, decoded_schema
from tableflow_core.pipeline.key_values import key_row_fitter
from tableflow_core.schemas.arrow_values import build_batch, storage_schema
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.payloads import PayloadError, payload_decoder
from tableflow_core.schemas.registry import RegistrySettings

VALUE_COLUMN = "value"  # the one column of a primitive payload decoded as columns


@dataclass(frozen=True)
class KeySpec:
    """Upsert: how a Kafka key becomes the key columns' values."""

    format: FormatSpec
    columns: tuple[str, ...]
    registry: RegistrySettings | None


@dataclass(frozen=True)
class _Bad:
    message: KafkaMessage
    error_class: str
    reason: str


class ChunkDecoder:
    def __init__(
        self,
        decoder: Any,
        table_schema: pa.Schema,
        key: KeySpec | None,
        run_id: str,
    ) -> None:
        self._decoder = decoder
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
            self._fit_key = key_row_fitter(self._key_storage, self._key_schema)

    @property
    def output_schema(self) -> pa.Schema:
        return self._out

    def decode(self, messages: Sequence[KafkaMessage]) -> Iterator[pa.RecordBatch]:
        bad: list[_Bad] = []
        keys: dict[tuple[int, int], dict[str, Any]] = {}
        valued: list[KafkaMessage] = []
        tombstones: list[KafkaMessage] = []
        for message in messages:
            if self._key is not None:
                try:
                    keys[(message.partition, message.offset)] = self._key_row(message)
                except PayloadError as exc:
                    bad.append(_Bad(message, "KeyDecodeError", f"key: {exc.reason}"))
                    continue
            if message.value is None:
                tombstones.append(message)
            else:
                valued.append(message)
        result = self._decoder.decode(valued)
        failed = {(f.partition, f.offset): f.reason for f in result.failures}
        by_position = {(m.partition, m.offset): m for m in valued}
        for position, reason in sorted(failed.items()):
            bad.append(_Bad(by_position[position], "DecodeError", reason))
        good = [m for m in valued if (m.partition, m.offset) not in failed]
        if len(good) != result.batch.num_rows:
            raise AssertionError("decoder output does not line up with its input messages")
        if good:
            yield self._good(result.batch, good, keys)
        if tombstones and self._key is not None:
            yield self._tombstones(tombstones, keys)
        if bad:
            yield self._bad(bad)

    def _key_row(self, message: KafkaMessage) -> dict[str, Any]:
        assert self._key is not None
        if message.key is None:
            raise PayloadError("an upsert record needs a key; this one has none")
        decoded = self._keys.decode(message.key)
        columns = self._key.columns
        if set(decoded) == {VALUE_COLUMN} and VALUE_COLUMN not in columns:
            if len(columns) != 1:
                raise PayloadError(f"a primitive key fills one key column, not {list(columns)}")
            decoded = {columns[0]: decoded[VALUE_COLUMN]}
        missing = [c for c in columns if decoded.get(c) is None]
        if missing:
            raise PayloadError(f"key has no value for key column(s) {missing}")
        return self._fit_key({c: decoded[c] for c in columns})  # PayloadError: a bad record

    def _key_arrays(
        self, messages: Sequence[KafkaMessage], keys: dict[tuple[int, int], dict[str, Any]]
    ) -> pa.RecordBatch:
        rows = [keys[(m.partition, m.offset)] for m in messages]
        try:
            return build_batch(rows, self._key_storage, self._key_schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise PayloadError(f"key does not fit the key columns: {exc}") from exc

    def _positions(self, messages: Sequence[KafkaMessage], tombstone: bool) -> list[pa.Array]:
        arrays = [
            pa.array([m.partition for m in messages], pa.int32()),
            pa.array([m.offset for m in messages], pa.int64()),
        ]
        if self._key is not None:
            arrays.append(pa.array([tombstone] * len(messages), pa.bool_()))
        return arrays

    def _good(
        self,
        batch: pa.RecordBatch,
        messages: Sequence[KafkaMessage],
        keys: dict[tuple[int, int], dict[str, Any]],
    ) -> pa.RecordBatch:
        columns = list(batch.columns)
        if self._key is not None:
            # The value wins: a key column comes from the key only where the value has none.
            key_batch = self._key_arrays(messages, keys)
            for name in self._key.columns:
                index = self._table.get_field_index(name)
                columns[index] = pc.coalesce(columns[index], key_batch.column(name))
        n = len(messages)
        arrays = [*columns, *self._positions(messages, False), pa.nulls(n, BAD_RECORD_STRUCT)]
        return pa.RecordBatch.from_arrays(arrays, schema=self._out)

    def _tombstones(
        self, messages: Sequence[KafkaMessage], keys: dict[tuple[int, int], dict[str, Any]]
    ) -> pa.RecordBatch:
        assert self._key is not None
        key_batch = self._key_arrays(messages, keys)
        n = len(messages)
        columns = [
            key_batch.column(f.name) if f.name in self._key.columns else pa.nulls(n, f.type)
            for f in self._table
        ]
        arrays = [*columns, *self._positions(messages, True), pa.nulls(n, BAD_RECORD_STRUCT)]
        return pa.RecordBatch.from_arrays(arrays, schema=self._out)

    def _bad(self, bad: Sequence[_Bad]) -> pa.RecordBatch:
        now = datetime.now(UTC)
        records = [
            {
                "source_topic": b.message.topic,
                "source_partition": b.message.partition,
                "source_offset": b.message.offset,
                "source_timestamp": (
                    None
                    if b.message.timestamp_ms is None or b.message.timestamp_ms < 0
                    else datetime.fromtimestamp(b.message.timestamp_ms / 1000, UTC)
                ),
                "key": b.message.key,
                "value": b.message.value,
                "headers": [{"key": k, "value": v} for k, v in b.message.headers] or None,
                "stage": "decode",
                "error_class": b.error_class,
                "error_message": b.reason,
                "run_id": self._run_id,
                "failed_at": now,
            }
            for b in bad
        ]
        messages = [b.message for b in bad]
        n = len(bad)
        columns = [pa.nulls(n, f.type) for f in self._table]
        struct = pa.array(records, BAD_RECORD_STRUCT)
        arrays = [*columns, *self._positions(messages, False), struct]
        return pa.RecordBatch.from_arrays(arrays, schema=self._out)
