"""What plan warns about, or refuses, in a table's config against its schemas (pure).

Each warning names something apply will do that the user must choose knowingly; each
refusal something that would put a clear value of a masked column where a mask promises
none (docs/security.md):

- a table with masks and a dead-letter target: what the target keeps of a bad record
  (`dlq.payload`: `raw` bytes, clear values included, or `masked`);
- `metadata_columns: [key]` on a table with masks: the Kafka key lands in clear in
  `_kafka_key`; refused when the key holds a masked column, warned about otherwise;
- an upsert table whose registry key schema lets a key column be null: such a record is
  a bad record, routed by `on_error`;
- a snapshot history (`expire_snapshots.older_than`) of many thousands of snapshots at
  the table's refresh interval: a metadata.json of megabytes on every commit.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from tableflow_core.config.project import Table
from tableflow_core.ingest.compiled import CompiledTable
from tableflow_core.maintenance.history import long_history_warning
from tableflow_core.plan.actions import Blocker, PlanWarning
from tableflow_core.plan.dead_letter_topic import routes_to_dead_letter
from tableflow_core.plan.ingest_spec import dead_letter_payload, masks_columns
from tableflow_core.plan.shape import PRIMITIVE_KEY_COLUMN
from tableflow_core.schemas.formats import declared_nullable, metadata_column_name

KAFKA_KEY_COLUMN = metadata_column_name("key")

# (table, its compiled transforms and checks, its decoded schema, its registry key schema)
WarningRule = Callable[
    [Table, CompiledTable | None, pa.Schema, pa.Schema | None], list[PlanWarning]
]


def _masked(compiled: CompiledTable | None) -> frozenset[str]:
    """The decoded columns a mask hides (none without transforms)."""
    return compiled.transforms.sensitive_columns() if compiled is not None else frozenset()


def _listed(names: frozenset[str] | set[str]) -> str:
    return ", ".join(sorted(names))


def _dead_letter_payload(
    table: Table, compiled: CompiledTable | None, decoded: pa.Schema, key: pa.Schema | None
) -> list[PlanWarning]:
    if table.dlq is None or not routes_to_dead_letter(table) or not masks_columns(compiled):
        return []
    target = f"kafka topic {table.dlq.topic}" if table.dlq.type == "kafka" else (
        f"iceberg table {table.dlq.table}"
    )  # fmt: skip
    masked = _listed(_masked(compiled)) or "the masked columns"
    if dead_letter_payload(table, compiled) == "raw":
        message = (
            f"dead-letter target {target} keeps each bad record's key and value as they were "
            f"on the topic (dlq.payload: raw): the clear values of masked column(s) {masked}"
        )
    else:
        message = (
            f"dead-letter target {target} keeps no key or value bytes of bad records (payload "
            "masked, the default for a table with masks): a record that decoded keeps its row "
            "as JSON with the masks applied, an undecodable one only its position, headers "
            f"and error (set dlq.payload: raw to keep the bytes, clear {masked} included)"
        )
    return [PlanWarning.at(table, "dlq", message)]


def key_fields(table: Table, decoded: pa.Schema) -> frozenset[str]:
    """The columns a record's Kafka key holds: an upsert table's key columns, and the
    fields of a record key stored in `_kafka_key`."""
    fields = set(table.key_columns) if table.mode == "upsert" else set()
    if KAFKA_KEY_COLUMN in decoded.names:
        key_type = decoded.field(KAFKA_KEY_COLUMN).type
        if pa.types.is_struct(key_type):
            fields |= {key_type.field(i).name for i in range(key_type.num_fields)}
    return frozenset(fields)


def masked_key_blockers(
    table: Table, compiled: CompiledTable | None, decoded: pa.Schema
) -> list[Blocker]:
    """`metadata_columns: [key]` when the key holds a masked column and `_kafka_key` is
    not masked the same way: the clear key would land in the table."""
    masked = _masked(compiled)
    if KAFKA_KEY_COLUMN not in decoded.names or not masked or KAFKA_KEY_COLUMN in masked:
        return []
    in_key = {f for f in key_fields(table, decoded) if f in masked}
    if not in_key:
        return []
    record_key = pa.types.is_struct(decoded.field(KAFKA_KEY_COLUMN).type)
    remedy = (
        "drop key from metadata_columns (a record key is a struct, which no mask applies to)"
        if record_key
        else f"mask {KAFKA_KEY_COLUMN} with the same mask (add it to the mask's columns) or "
        "drop key from metadata_columns"
    )
    return [
        Blocker.at(
            table,
            "metadata_columns",
            "invalid",
            f"metadata column key would store the Kafka key in clear in {KAFKA_KEY_COLUMN}, "
            f"and the key holds masked column(s) {_listed(in_key)}: {remedy}",
        )
    ]


def _kafka_key_in_clear(
    table: Table, compiled: CompiledTable | None, decoded: pa.Schema, key: pa.Schema | None
) -> list[PlanWarning]:
    masked = _masked(compiled)
    if KAFKA_KEY_COLUMN not in decoded.names or not masked or KAFKA_KEY_COLUMN in masked:
        return []
    if {f for f in key_fields(table, decoded) if f in masked}:
        return []  # refused (masked_key_blockers)
    return [
        PlanWarning.at(
            table,
            "metadata_columns",
            f"metadata column key stores each record's Kafka key in clear in "
            f"{KAFKA_KEY_COLUMN}; the table masks {_listed(masked)}: if the key holds one of "
            f"their values, mask {KAFKA_KEY_COLUMN} too",
        )
    ]


def _nullable_key_fields(
    table: Table, compiled: CompiledTable | None, decoded: pa.Schema, key: pa.Schema | None
) -> list[PlanWarning]:
    if table.mode != "upsert" or key is None or key.names == [PRIMITIVE_KEY_COLUMN]:
        return []
    # From the key's declared schema: Arrow marks every decoded field nullable.
    nullable = [c for c in table.key_columns if c in key.names and declared_nullable(key.field(c))]
    if not nullable:
        return []
    subject = table.key.subject or f"{table.topic}-key"
    return [
        PlanWarning.at(
            table,
            "key_columns",
            f"the key schema (subject {subject}) lets key field(s) {', '.join(nullable)} be "
            "null: a record whose key has one null has no key to upsert by and is a bad "
            f"record (on_error: {table.on_error})",
        )
    ]


def _long_history(
    table: Table, compiled: CompiledTable | None, decoded: pa.Schema, key: pa.Schema | None
) -> list[PlanWarning]:
    """An explicit `expire_snapshots.older_than` that keeps many thousands of snapshots
    at the table's refresh interval (maintenance/history.py)."""
    message = long_history_warning(table)
    if message is None:
        return []
    return [PlanWarning.at(table, "maintenance", message)]


RULES: tuple[WarningRule, ...] = (
    _dead_letter_payload,
    _kafka_key_in_clear,
    _nullable_key_fields,
    _long_history,
)


def table_warnings(
    table: Table, compiled: CompiledTable | None, decoded: pa.Schema, key: pa.Schema | None
) -> list[PlanWarning]:
    return [warning for rule in RULES for warning in rule(table, compiled, decoded, key)]
