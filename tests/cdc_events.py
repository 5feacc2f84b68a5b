"""Debezium 3.x PostgreSQL change events, as the connector writes them, for tests.

`Change` is one event; `avro_envelope_schema()` is the value schema Debezium registers
with Confluent's AvroConverter for a table `pg.public.customers (id int primary key,
name text, balance numeric(10,2), updated_at timestamp)` (connect.name, connect.version
and connect.parameters as the converter writes them), `KEY_SCHEMA` the key's.
`envelope(change)` is the value the AvroSerializer / JSONSerializer is given.
`connect_json_value(change)` / `connect_json_key(key)` are the bytes Connect's
JsonConverter writes with `schemas.enable=true` (`{"schema": ..., "payload": ...}`, compact,
schema first; Decimals as base64 of the unscaled two's complement), `connect_envelope_schema()`
the Connect schema it embeds (the same table as the Avro one).
"""

from __future__ import annotations

import base64
import json
import random
import time
from dataclasses import dataclass
from decimal import MAX_PREC, Context, Decimal
from typing import Any

from tableflow_core.kafka.messages import KafkaMessage
from tests.avro_records import avro_record, nullable, with_default

TOPIC = "pg.public.customers"

VALUE_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "int"},
    {"name": "name", "type": ["null", "string"], "default": None},
    {
        "name": "balance",
        "type": [
            "null",
            {
                "type": "bytes",
                "scale": 2,
                "precision": 10,
                "connect.version": 1,
                "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                "connect.name": "org.apache.kafka.connect.data.Decimal",
                "logicalType": "decimal",
            },
        ],
        "default": None,
    },
    {
        "name": "updated_at",
        "type": [
            "null",
            {
                "type": "long",
                "connect.version": 1,
                "connect.name": "io.debezium.time.MicroTimestamp",
            },
        ],
        "default": None,
    },
]

SOURCE_SCHEMA: dict[str, Any] = avro_record(
    "Source",
    namespace="io.debezium.connector.postgresql",
    properties={"connect.name": "io.debezium.connector.postgresql.Source"},
    version="string",
    connector="string",
    name="string",
    ts_ms="long",
    snapshot=with_default(
        [
            {
                "type": "string",
                "connect.version": 1,
                "connect.parameters": {
                    "allowed": "true,first,first_in_data_collection,"
                    "last_in_data_collection,last,false,incremental"
                },
                "connect.default": "false",
                "connect.name": "io.debezium.data.Enum",
            },
            "null",
        ],
        "false",
    ),
    db="string",
    sequence=nullable("string"),
    ts_us=nullable("long"),
    ts_ns=nullable("long"),
    schema="string",
    table="string",
    txId=nullable("long"),
    lsn=nullable("long"),
    xmin=nullable("long"),
)

TRANSACTION_SCHEMA: dict[str, Any] = avro_record(
    "block",
    namespace="event",
    properties={"connect.version": 1, "connect.name": "event.block"},
    id="string",
    total_order="long",
    data_collection_order="long",
)

KEY_SCHEMA: dict[str, Any] = avro_record(
    "Key", namespace=TOPIC, properties={"connect.name": f"{TOPIC}.Key"}, id="int"
)


def avro_envelope_schema(extra_fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The envelope schema; `extra_fields` appended to the row (ALTER TABLE ADD COLUMN)."""
    value = {
        "type": "record",
        "name": "Value",
        "namespace": TOPIC,
        "fields": [*VALUE_FIELDS, *(extra_fields or [])],
        "connect.name": f"{TOPIC}.Value",
    }
    return avro_record(
        "Envelope",
        namespace=TOPIC,
        properties={"connect.version": 2, "connect.name": f"{TOPIC}.Envelope"},
        before=nullable(value),
        after=nullable("Value"),
        source=SOURCE_SCHEMA,
        transaction=nullable(TRANSACTION_SCHEMA),
        op="string",
        ts_ms=nullable("long"),
        ts_us=nullable("long"),
        ts_ns=nullable("long"),
    )


@dataclass(frozen=True)
class Change:
    """One change event. `before`/`after`: row dicts (None where Debezium sends null);
    `lsn`: the change's LSN; `last_commit`: `source.sequence[0]` (None in a snapshot)."""

    op: str
    key: int
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    lsn: int
    last_commit: int | None
    tx_id: int
    ts_ms: int = 1_767_225_600_000
    snapshot: str = "false"


def row(
    key: int, name: str | None, balance: str | None = None, micros: int | None = None
) -> dict[str, Any]:
    return {
        "id": key,
        "name": name,
        "balance": None if balance is None else Decimal(balance),
        "updated_at": micros,
    }


def source(change: Change) -> dict[str, Any]:
    return {
        "version": "3.6.1.Final",
        "connector": "postgresql",
        "name": "pg",
        "ts_ms": change.ts_ms,
        "snapshot": change.snapshot,
        "db": "shop",
        "sequence": json.dumps(
            [None if change.last_commit is None else str(change.last_commit), str(change.lsn)]
        ),
        "ts_us": change.ts_ms * 1000,
        "ts_ns": change.ts_ms * 1_000_000,
        "schema": "public",
        "table": "customers",
        "txId": change.tx_id,
        "lsn": change.lsn,
        "xmin": None,
    }


def envelope(change: Change) -> dict[str, Any]:
    """The value Debezium hands the converter (`transaction` as with
    provide.transaction.metadata=true)."""
    return {
        "before": change.before,
        "after": change.after,
        "source": source(change),
        "transaction": {
            "id": f"{change.tx_id}:{change.lsn}",
            "total_order": 1,
            "data_collection_order": 1,
        },
        "op": change.op,
        "ts_ms": change.ts_ms + 5,
        "ts_us": (change.ts_ms + 5) * 1000,
        "ts_ns": (change.ts_ms + 5) * 1_000_000,
    }


def workload(
    rng: random.Random, keys: int, transactions: int
) -> tuple[list[Change], dict[int, tuple[str, int]]]:
    """A source table's changes in commit order: a snapshot, then transactions of inserts,
    updates, deletes and primary-key moves (delete of the old key, its tombstone, create
    of the new one), each change with PostgreSQL's positions: the change LSNs of
    interleaved transactions are not in commit order, `last_commit` is. Returns the
    changes and the model: the source table at the end (key -> (name, LSN))."""
    table: dict[int, str] = {k: f"v{k}" for k in range(keys)}
    snapshot_lsn = 1_000
    changes = [
        Change("r", k, None, row(k, v), snapshot_lsn, None, 1, snapshot="true")
        for k, v in table.items()
    ]
    state = {k: (v, snapshot_lsn) for k, v in table.items()}
    last_commit: int | None = None
    next_key = keys
    for tx in range(transactions):
        # Each transaction's changes: LSNs start below the previous commit sometimes
        # (a transaction that began earlier), always above the snapshot.
        base = 2_000 + tx * 100 - rng.choice([0, 0, 150])
        lsn = base
        for _ in range(rng.randint(1, 4)):
            lsn += rng.randint(1, 5)
            kind = rng.choice(["insert", "update", "update", "delete", "move"])
            live = sorted(table)
            if kind == "insert" or not live:
                key, next_key = next_key, next_key + 1
                table[key] = f"i{tx}"
                changes.append(
                    Change("c", key, None, row(key, table[key]), lsn, last_commit, tx + 2)
                )
                state[key] = (table[key], lsn)
            elif kind == "update":
                key = rng.choice(live)
                old, table[key] = table[key], f"u{tx}.{lsn}"
                changes.append(
                    Change("u", key, row(key, old), row(key, table[key]), lsn, last_commit, tx + 2)
                )
                state[key] = (table[key], lsn)
            else:
                key = rng.choice(live)
                old = table.pop(key)
                state.pop(key)
                changes.append(Change("d", key, row(key, old), None, lsn, last_commit, tx + 2))
                changes.append(Change("tombstone", key, None, None, 0, None, 0))
                if kind == "move":  # UPDATE ... SET id = new: Debezium's delete + create
                    lsn += 1
                    new_key, next_key = next_key, next_key + 1
                    table[new_key] = old
                    changes.append(
                        Change("c", new_key, None, row(new_key, old), lsn, last_commit, tx + 2)
                    )
                    state[new_key] = (old, lsn)
        last_commit = 2_000 + tx * 100 + 90  # this transaction's commit
    return changes, state


def to_partitions(
    encoded: list[tuple[bytes, bytes | None]],
    changes: list[Change],
    partitions: int,
    replay: bool = True,
) -> list[KafkaMessage]:
    """The topic's records: each key hashed to a partition (a moved key's create lands
    elsewhere), with (`replay`) a connector restart that sends a stretch of changes again; the
    Kafka timestamps of the replayed stretch are later than everything."""
    logs: list[list[tuple[bytes, bytes | None, int]]] = [[] for _ in range(partitions)]
    ts = int(time.time() * 1000) - 10_000_000  # inside any retention
    replay_from = len(changes) * 2 // 3
    order = list(range(len(changes)))
    if replay:
        order += list(range(max(0, replay_from - 10), replay_from))
    for i in order:
        ts += 1
        logs[changes[i].key % partitions].append((*encoded[i], ts))
    return [
        KafkaMessage(TOPIC, p, offset, ts, k, v)
        for p, log in enumerate(logs)
        for offset, (k, v, ts) in enumerate(log)
    ]


# ---------------------------------------------------------------- Connect's JsonConverter

CONNECT_VALUE_FIELDS: list[dict[str, Any]] = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "field": "balance",
    },
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.MicroTimestamp",
        "version": 1,
        "field": "updated_at",
    },
]

CONNECT_SOURCE_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "version"},
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "string", "optional": False, "field": "name"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {
            "type": "string",
            "optional": True,
            "name": "io.debezium.data.Enum",
            "version": 1,
            "parameters": {
                "allowed": "true,first,first_in_data_collection,last_in_data_collection,"
                "last,false,incremental"
            },
            "default": "false",
            "field": "snapshot",
        },
        {"type": "string", "optional": False, "field": "db"},
        {"type": "string", "optional": True, "field": "sequence"},
        {"type": "int64", "optional": True, "field": "ts_us"},
        {"type": "int64", "optional": True, "field": "ts_ns"},
        {"type": "string", "optional": False, "field": "schema"},
        {"type": "string", "optional": False, "field": "table"},
        {"type": "int64", "optional": True, "field": "txId"},
        {"type": "int64", "optional": True, "field": "lsn"},
        {"type": "int64", "optional": True, "field": "xmin"},
    ],
    "optional": False,
    "name": "io.debezium.connector.postgresql.Source",
    "version": 1,
    "field": "source",
}

CONNECT_KEY_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [{"type": "int32", "optional": False, "field": "id"}],
    "optional": False,
    "name": f"{TOPIC}.Key",
}


def connect_envelope_schema(extra_fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The envelope's Connect schema; `extra_fields` appended to the row (ADD COLUMN)."""

    def image(field: str) -> dict[str, Any]:
        return {
            "type": "struct",
            "fields": [*CONNECT_VALUE_FIELDS, *(extra_fields or [])],
            "optional": True,
            "name": f"{TOPIC}.Value",
            "field": field,
        }

    return {
        "type": "struct",
        "fields": [
            image("before"),
            image("after"),
            CONNECT_SOURCE_SCHEMA,
            {
                "type": "struct",
                "fields": [
                    {"type": "string", "optional": False, "field": "id"},
                    {"type": "int64", "optional": False, "field": "total_order"},
                    {"type": "int64", "optional": False, "field": "data_collection_order"},
                ],
                "optional": True,
                "name": "event.block",
                "version": 1,
                "field": "transaction",
            },
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {"type": "int64", "optional": True, "field": "ts_us"},
            {"type": "int64", "optional": True, "field": "ts_ns"},
        ],
        "optional": False,
        "name": f"{TOPIC}.Envelope",
        "version": 2,
    }


def connect_decimal(value: Decimal, scale: int) -> str:
    """A Connect Decimal as JsonConverter writes it: Java's BigInteger.toByteArray() of the
    unscaled value (big-endian two's complement, fewest bytes), in base64."""
    unscaled = int(value.scaleb(scale, Context(prec=MAX_PREC)))
    size = (unscaled + (unscaled < 0)).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode("ascii")


def connect_image(image: dict[str, Any] | None) -> dict[str, Any] | None:
    if image is None:
        return None
    out = dict(image)
    if out.get("balance") is not None:
        out["balance"] = connect_decimal(out["balance"], 2)
    return out


def _compact(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


def connect_json_value(change: Change, schema: dict[str, Any] | None = None) -> bytes:
    payload = envelope(change)
    payload["before"] = connect_image(change.before)
    payload["after"] = connect_image(change.after)
    return _compact({"schema": schema or connect_envelope_schema(), "payload": payload})


def connect_json_key(key: int) -> bytes:
    return _compact({"schema": CONNECT_KEY_SCHEMA, "payload": {"id": key}})
