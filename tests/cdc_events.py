"""Debezium 3.x PostgreSQL change events, as the connector writes them, for tests.

`Change` is one event; `avro_envelope_schema()` is the value schema Debezium registers
with Confluent's AvroConverter for a table `pg.public.customers (id int primary key,
name text, balance numeric(10,2), updated_at timestamp)` (connect.name, connect.version
and connect.parameters as the converter writes them), `KEY_SCHEMA` the key's.
`envelope(change)` is the value the AvroSerializer / JSONSerializer is given.
`json_embedded(change)` is the value Connect's JsonConverter writes with
`schemas.enable=true`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

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

SOURCE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Source",
    "namespace": "io.debezium.connector.postgresql",
    "fields": [
        {"name": "version", "type": "string"},
        {"name": "connector", "type": "string"},
        {"name": "name", "type": "string"},
        {"name": "ts_ms", "type": "long"},
        {
            "name": "snapshot",
            "type": [
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
            "default": "false",
        },
        {"name": "db", "type": "string"},
        {"name": "sequence", "type": ["null", "string"], "default": None},
        {"name": "ts_us", "type": ["null", "long"], "default": None},
        {"name": "ts_ns", "type": ["null", "long"], "default": None},
        {"name": "schema", "type": "string"},
        {"name": "table", "type": "string"},
        {"name": "txId", "type": ["null", "long"], "default": None},
        {"name": "lsn", "type": ["null", "long"], "default": None},
        {"name": "xmin", "type": ["null", "long"], "default": None},
    ],
    "connect.name": "io.debezium.connector.postgresql.Source",
}

TRANSACTION_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "block",
    "namespace": "event",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "total_order", "type": "long"},
        {"name": "data_collection_order", "type": "long"},
    ],
    "connect.version": 1,
    "connect.name": "event.block",
}

KEY_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Key",
    "namespace": TOPIC,
    "fields": [{"name": "id", "type": "int"}],
    "connect.name": f"{TOPIC}.Key",
}


def avro_envelope_schema(extra_fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The envelope schema; `extra_fields` appended to the row (ALTER TABLE ADD COLUMN)."""
    value = {
        "type": "record",
        "name": "Value",
        "namespace": TOPIC,
        "fields": [*VALUE_FIELDS, *(extra_fields or [])],
        "connect.name": f"{TOPIC}.Value",
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": TOPIC,
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": SOURCE_SCHEMA},
            {"name": "transaction", "type": ["null", TRANSACTION_SCHEMA], "default": None},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {"name": "ts_us", "type": ["null", "long"], "default": None},
            {"name": "ts_ns", "type": ["null", "long"], "default": None},
        ],
        "connect.version": 2,
        "connect.name": f"{TOPIC}.Envelope",
    }


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
