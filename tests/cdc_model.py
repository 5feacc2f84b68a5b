"""An independent reading of Debezium change topics: decode and reduce to the mirror.

Written from Debezium's documentation of its PostgreSQL connector and Kafka Connect's
JsonConverter (schemas embedded), not from tableflow's decoder, so the end-to-end test
can tell Debezium's capture from tableflow's materialization:

- keys: `{"schema": ..., "payload": {<primary key columns>}}`; a key always lands on the
  same partition, so the order of one key's changes is its partition's order;
- values: the envelope `{before, after, source, op, ...}`; `c`/`r`/`u` put `after`, `d`
  and a tombstone (null value) remove the key; a primary-key update is a `d` of the old
  key (+ tombstone) and a `c` of the new one;
- `org.apache.kafka.connect.data.Decimal`: big-endian two's complement bytes in base64,
  its scale in the field's parameters; `io.debezium.time.MicroTimestamp`: microseconds
  since the epoch, no zone (PostgreSQL `timestamp`).

Avro (`AvroEnvelopes`, through Apicurio's converter): Confluent's framing (magic byte,
4-byte schema id), the writer schema fetched by id from the registry and read with
fastavro; a MicroTimestamp is a `long` whose schema carries
`connect.name: io.debezium.time.MicroTimestamp`, a decimal Avro's decimal logical type.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import struct
import time
import urllib.request
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

import fastavro
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

EPOCH = dt.datetime(1970, 1, 1)
Row = dict[str, Any]
Key = tuple[Any, ...]


def _decimal(value: Any, field: dict[str, Any]) -> Decimal:
    scale = int(field.get("parameters", {}).get("scale", 0))
    unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
    return Decimal(unscaled).scaleb(-scale)


def _micro_timestamp(value: Any, field: dict[str, Any]) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=int(value))


LOGICAL: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "org.apache.kafka.connect.data.Decimal": _decimal,
    "io.debezium.time.MicroTimestamp": _micro_timestamp,
}


def decode_struct(payload: dict[str, Any] | None, schema: dict[str, Any]) -> Row | None:
    if payload is None:
        return None
    row: Row = {}
    for field in schema["fields"]:
        value = payload.get(field["field"])
        name = field.get("name")
        if value is not None and name in LOGICAL:
            value = LOGICAL[name](value, field)
        elif value is not None and name is not None and field["type"] != "string":
            raise ValueError(f"the model does not decode {name} ({field['field']})")
        row[field["field"]] = value
    return row


def after_image(value: bytes) -> tuple[str, Row | None, dict[str, Any]]:
    """(op, decoded after image, source block) of one change event."""
    document = json.loads(value)
    schema = {f["field"]: f for f in document["schema"]["fields"]}
    payload = document["payload"]
    return payload["op"], decode_struct(payload["after"], schema["after"]), payload["source"]


def key_of(key: bytes, columns: tuple[str, ...]) -> Key:
    payload = json.loads(key)["payload"]
    return tuple(payload[c] for c in columns)


class JsonEnvelopes:
    """Debezium's JSON with embedded schemas (JsonConverter, schemas.enable=true)."""

    def key(self, key: bytes, columns: tuple[str, ...]) -> Key:
        return key_of(key, columns)

    def event(self, value: bytes) -> tuple[str, Row | None]:
        op, after, _ = after_image(value)
        return op, after


class AvroEnvelopes:
    """Confluent-framed Avro keys and envelopes, writer schemas from the registry."""

    def __init__(self, registry_url: str) -> None:
        self.registry_url = registry_url
        self._schemas: dict[int, tuple[Any, set[str]]] = {}

    def _schema(self, schema_id: int) -> tuple[Any, set[str]]:
        if schema_id not in self._schemas:
            with urllib.request.urlopen(
                f"{self.registry_url}/schemas/ids/{schema_id}", timeout=30
            ) as response:
                document = json.loads(json.loads(response.read())["schema"])
            self._schemas[schema_id] = (
                fastavro.parse_schema(document),
                _micro_timestamp_fields(document),
            )
        return self._schemas[schema_id]

    def _read(self, data: bytes) -> tuple[dict[str, Any], set[str]]:
        if data[:1] != b"\x00":
            raise ValueError(f"not Confluent-framed Avro: {data[:5]!r}")
        (schema_id,) = struct.unpack(">I", data[1:5])
        parsed, micros = self._schema(schema_id)
        record = fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed, None)
        return dict(record), micros  # type: ignore[arg-type]

    def key(self, key: bytes, columns: tuple[str, ...]) -> Key:
        record, _ = self._read(key)
        return tuple(record[c] for c in columns)

    def event(self, value: bytes) -> tuple[str, Row | None]:
        envelope, micros = self._read(value)
        after = envelope["after"]
        if after is not None:
            after = {
                k: _micro_timestamp(v, {}) if k in micros and v is not None else v
                for k, v in after.items()
            }
        return envelope["op"], after


def _micro_timestamp_fields(envelope_schema: dict[str, Any]) -> set[str]:
    """Names of the `after` record's fields that are Debezium MicroTimestamps (none in a key)."""
    after = next((f for f in envelope_schema["fields"] if f["name"] == "after"), None)
    if after is None:
        return set()
    records: dict[str, dict[str, Any]] = {}
    _collect_records(envelope_schema, envelope_schema.get("namespace", ""), records)
    types = after["type"] if isinstance(after["type"], list) else [after["type"]]
    # `after` names the record `before` defined (Avro defines a named type once)
    record = next(records.get(t, t) if isinstance(t, str) else t for t in types if t != "null")
    names = set()
    for field in record["fields"]:
        branches = field["type"] if isinstance(field["type"], list) else [field["type"]]
        if any(
            isinstance(b, dict) and b.get("connect.name") == "io.debezium.time.MicroTimestamp"
            for b in branches
        ):
            names.add(field["name"])
    return names


def _collect_records(schema: Any, namespace: str, found: dict[str, dict[str, Any]]) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _collect_records(branch, namespace, found)
    elif isinstance(schema, dict):
        if schema.get("type") == "record":
            space = schema.get("namespace", namespace)
            found[schema["name"]] = schema
            found[f"{space}.{schema['name']}"] = schema
            for field in schema["fields"]:
                _collect_records(field["type"], space, found)
        elif isinstance(schema.get("type"), dict | list):
            _collect_records(schema["type"], namespace, found)


Envelopes = JsonEnvelopes | AvroEnvelopes


def read_topic(config: dict[str, Any], topic: str) -> list[tuple[int, int, bytes, bytes | None]]:
    """Every record of `topic` up to its end offsets now: (partition, offset, key, value)."""
    consumer = Consumer({**config, "group.id": "cdc-model", "enable.auto.commit": False})
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
        ends = {}
        for partition in metadata.partitions:
            high = _end_offset(consumer, TopicPartition(topic, partition))
            if high > 0:
                ends[partition] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        records: list[tuple[int, int, bytes, bytes | None]] = []
        done: set[int] = set()
        while len(done) < len(ends):
            message = consumer.poll(5.0)
            if message is None:
                continue
            if message.error():
                raise RuntimeError(f"{topic}: {message.error()}")
            partition, offset = message.partition(), message.offset()
            if offset < ends[partition]:
                records.append((partition, offset, message.key(), message.value()))
            if offset + 1 >= ends[partition]:
                done.add(partition)
        return records
    finally:
        consumer.close()


# A topic Debezium just created may have no leader yet (NOT_LEADER_FOR_PARTITION, seen
# once in a suite run): the watermark query fails with one of these until it has.
_LEADER_PENDING = frozenset(
    [
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    ]
)


def _end_offset(consumer: Consumer, partition: TopicPartition, timeout: float = 30.0) -> int:
    """The partition's end offset, waiting for its leader (`_LEADER_PENDING`)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return int(consumer.get_watermark_offsets(partition, timeout=timeout)[1])
        except KafkaException as exc:
            if exc.args[0].code() not in _LEADER_PENDING or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def reduce_to_mirror(
    records: Iterable[tuple[int, int, bytes, bytes | None]],
    key_columns: tuple[str, ...],
    envelopes: Envelopes | None = None,
) -> tuple[dict[Key, Row], dict[str, int]]:
    """The rows a mirror holds after `records` (each partition in offset order)."""
    decoder = envelopes or JsonEnvelopes()
    mirror: dict[Key, Row] = {}
    ops: dict[str, int] = {}
    for _, _, key, value in sorted(records, key=lambda r: (r[0], r[1])):
        row_key = decoder.key(key, key_columns)
        if value is None:
            ops["tombstone"] = ops.get("tombstone", 0) + 1
            mirror.pop(row_key, None)
            continue
        op, after = decoder.event(value)
        ops[op] = ops.get(op, 0) + 1
        if op == "d":
            mirror.pop(row_key, None)
        elif op in {"c", "r", "u"} and after is not None:
            mirror[row_key] = after
        else:
            raise ValueError(f"unexpected change event op={op!r} for key {row_key}")
    return mirror, ops


def first_difference(
    got: dict[Key, Row], expected: dict[Key, Row], columns: Iterable[str] | None = None
) -> str | None:
    """The first key whose row differs (missing, extra, or a value), or None."""
    for key in sorted(set(got) | set(expected)):
        if key not in got:
            return f"missing key {key}: source has {expected[key]}"
        if key not in expected:
            return f"extra key {key}: {got[key]} (not in the source)"
        for column in columns or expected[key]:
            if got[key].get(column) != expected[key].get(column):
                return (
                    f"key {key} column {column}: {got[key].get(column)!r} != source "
                    f"{expected[key].get(column)!r}"
                )
    return None
