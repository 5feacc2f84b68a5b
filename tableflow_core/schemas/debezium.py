"""Debezium change events (`value.envelope: debezium`): the `after` image and its metadata.

A Debezium value is an envelope `{before, after, source, op, ts_ms, transaction}`
(docs/cdc.md). The table's columns are the fields of `after`'s record type
(`after_fields`, at plan time); each record decodes to one row:

- `op` `c` (insert), `r` (snapshot read), `u` (update): the `after` image;
- `d` (delete): the `before` image (all columns with `REPLICA IDENTITY FULL`, else only
  the primary key's), flagged as a delete (`OP_COLUMN`): an upsert table (the mirror)
  deletes its key, an append table (the changelog) keeps the row;
- `t` (truncate) and any other operation: a bad record (`PayloadError`), routed by the
  table's `on_error` and counted, never applied or dropped in silence: a mirror cannot
  replay a truncate against rows other runs wrote (docs/cdc.md says why).

With each row go the event's metadata columns (`_cdc_op`, `_cdc_source_ts`, `_cdc_lsn`,
`_cdc_tx_id`) and its source position for the order of a key's changes
(`_cdc_last_commit_lsn`, `_cdc_lsn`: Debezium's PostgreSQL `source.sequence`, the LSN of
the last transaction committed before this event's and the event's own LSN;
`ingest/upsert_order.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from tableflow_core.schemas.arrow_values import SchemaMappingError
from tableflow_core.schemas.formats import metadata_column_name
from tableflow_core.schemas.payloads import PayloadDecoder, PayloadError, TupleReader

# Hidden column the decoder adds after the table's: the event's operation (`c`, `r`, `u`,
# `d`). The read tasks turn `d` rows into deletes (mirror) or keep them (changelog).
OP_COLUMN = "__tf_cdc_op"
DELETE = "d"
UPSERTS = frozenset({"c", "r", "u"})
TRUNCATE = "t"

OP = metadata_column_name("cdc_op")
SOURCE_TS = metadata_column_name("cdc_source_ts")
LSN = metadata_column_name("cdc_lsn")
TX_ID = metadata_column_name("cdc_tx_id")
LAST_COMMIT_LSN = metadata_column_name("cdc_last_commit_lsn")
# Columns filled from the event rather than from the Kafka record.
EVENT_COLUMNS = frozenset({OP, SOURCE_TS, LSN, TX_ID, LAST_COMMIT_LSN})


class NotAnEnvelope(SchemaMappingError):
    """The value's schema is not a Debezium change event's."""


def after_fields(value_type: pa.DataType, where: str) -> list[pa.Field]:
    """The table's columns for a Debezium envelope of Arrow type `value_type`: the fields
    of its `after` record."""
    if not pa.types.is_struct(value_type):
        raise NotAnEnvelope(f"{where} is not a record, so not a Debezium change event")
    names = [value_type.field(i).name for i in range(value_type.num_fields)]
    missing = [n for n in ("after", "op", "source") if n not in names]
    if missing:
        raise NotAnEnvelope(
            f"{where} has no field(s) {missing}: not a Debezium change event envelope "
            f"(fields {names}); `envelope: debezium` needs the connector's default envelope, "
            "without the ExtractNewRecordState transform"
        )
    after = value_type.field("after").type
    if not pa.types.is_struct(after):
        raise NotAnEnvelope(f"{where}: field 'after' is {after}, not a record")
    return [after.field(i).with_nullable(True) for i in range(after.num_fields)]


def _micros(source: dict[str, Any]) -> int | None:
    us = source.get("ts_us")
    if us is not None:
        return int(us)
    ms = source.get("ts_ms")
    return None if ms is None else int(ms) * 1000


def _lsn(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise PayloadError(f"source position {value!r} is not a log sequence number")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise PayloadError(f"source position {value!r} is not a log sequence number") from None


def last_commit_lsn(source: dict[str, Any]) -> int | None:
    """`source.sequence`'s first element: PostgreSQL's LSN of the last transaction
    committed before this event (null in a snapshot and before the first commit seen);
    None when the connector gives no sequence."""
    sequence = source.get("sequence")
    if sequence is None:
        return None
    if isinstance(sequence, str):
        # Debezium writes `[null,"<lsn>"]` or `["<lsn>","<lsn>"]`: read without a JSON
        # parse (1.2 of the 10.4 s a 20k-row snapshot's envelopes took to decode, profiled).
        if not sequence.endswith('"]') or sequence.count(",") != 1:
            pass  # not Debezium's layout: the JSON parse below says what it is
        elif sequence.startswith('[null,"'):
            return None
        elif sequence.startswith('["'):
            end = sequence.find('"', 2)
            first = sequence[2:end]
            if end > 2 and first.isascii() and first.isdigit() and sequence[end : end + 3] == '","':
                return int(first)
    try:
        parsed = json.loads(sequence) if isinstance(sequence, str) else sequence
    except ValueError:
        raise PayloadError(f"source.sequence {sequence!r} is not a JSON array") from None
    if not isinstance(parsed, list) or len(parsed) != 2:
        raise PayloadError(f"source.sequence {sequence!r} is not [last commit LSN, LSN]")
    return _lsn(parsed[0])


def change_row(envelope: Any) -> dict[str, Any]:
    """One change event (a decoded envelope) -> the row it lands as, with OP_COLUMN and
    the event columns; PayloadError for a truncate, an unknown operation or an event
    without its image."""
    if not isinstance(envelope, dict):
        raise PayloadError(f"a Debezium change event is a record, not {type(envelope).__name__}")
    op = envelope.get("op")
    source = envelope.get("source") or {}
    if op in UPSERTS:
        image = envelope.get("after")
        if image is None:
            raise PayloadError(f"Debezium event with op {op!r} has no 'after' image")
    elif op == DELETE:
        image = envelope.get("before") or {}
    elif op == TRUNCATE:
        raise PayloadError(
            "Debezium truncate event (op 't') of table "
            f"{source.get('schema', '?')}.{source.get('table', '?')}: a truncate is not "
            "applied (docs/cdc.md, 'Truncate'); route it with on_error or re-create the table"
        )
    else:
        raise PayloadError(f"unknown Debezium operation {op!r} (expected c, r, u, d)")
    row = dict(image)
    row[OP_COLUMN] = op
    row[OP] = op
    row[SOURCE_TS] = _micros(source)
    row[LSN] = _lsn(source.get("lsn"))
    tx = source.get("txId")
    row[TX_ID] = None if tx is None else int(tx)
    row[LAST_COMMIT_LSN] = last_commit_lsn(source)
    return row


class DebeziumPayloadDecoder:
    """A value decoder for change events: decodes the envelope with `inner` (the
    format's own decoder, as a whole value) and returns the row `change_row` makes."""

    def __init__(self, inner: PayloadDecoder) -> None:
        self._inner = inner
        self.temporal = inner.temporal

    def decode(self, data: bytes) -> Any:
        return change_row(self._inner.decode(data))

    def tuple_reader(self, columns: Sequence[str]) -> TupleReader:
        decode: Callable[[bytes], dict[str, Any]] = self.decode
        names = tuple(columns)

        def read(data: bytes) -> tuple[Any, ...]:
            return tuple(map(decode(data).get, names))

        return read
