"""A table's desired shape: the one function `plan` and `apply` both use.

`desired_shape(table, resolved)` gives the columns (after transforms), partitioning, sort
order, mode, key and properties the table must have. Stages that change the schema (the
transforms) register a `SchemaStep` in `SCHEMA_STEPS`; they run in order on the decoded
schema.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tableflow_core.config.project import Table
from tableflow_core.errors import TableflowError
from tableflow_core.ingest.spec import DEFAULT_TABLE_PROPERTIES
from tableflow_core.ingest.stages import Mode
from tableflow_core.ingest.terms import PartitionTerm, SortTerm
from tableflow_core.ingest.upsert_order import POSITION_COLUMNS
from tableflow_core.maintenance.history import table_history

# Upsert tables: MERGE writes position deletes instead of rewriting data files.
UPSERT_TABLE_PROPERTIES: dict[str, str] = {
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
}
# Table properties tableflow writes to remember how a table was made.
MODE_PROPERTY = "tableflow.mode"
TOPIC_PROPERTY = "tableflow.topic"
KEY_PROPERTY = "tableflow.key-columns"

# (table, schema so far) -> schema after the step. The transforms issue registers here.
SchemaStep = Callable[[Table, pa.Schema], pa.Schema]
SCHEMA_STEPS: list[SchemaStep] = []

# The one column a primitive payload resolves to (schemas.resolve.VALUE_COLUMN).
PRIMITIVE_KEY_COLUMN = "value"
# Key formats whose one-column type is known without the registry.
_PRIMITIVE_KEY_TYPES: dict[str, pa.DataType] = {"string": pa.string(), "bytes": pa.binary()}


class ShapeError(TableflowError, ValueError):
    """The table cannot have a consistent shape (e.g. a key column nowhere to be found)."""


@dataclass(frozen=True)
class TableShape:
    schema: pa.Schema  # the table's columns, in order
    partition_by: tuple[PartitionTerm, ...]
    sort_by: tuple[SortTerm, ...]
    mode: Mode
    key_columns: tuple[str, ...]
    properties: dict[str, str] = field(default_factory=dict)
    # The decoded record's columns, before the SCHEMA_STEPS (what the decode stage produces).
    decoded_schema: pa.Schema | None = None


def partition_terms(table: Table) -> tuple[PartitionTerm, ...]:
    return tuple(
        PartitionTerm(column=p.column, transform=p.transform, param=p.param)
        for p in table.partition_by
    )


def sort_terms(table: Table) -> tuple[SortTerm, ...]:
    terms = []
    for s in table.sort_by:
        descending = s.direction == "desc"
        nulls_first = s.nulls == "first" if s.nulls else not descending
        terms.append(SortTerm(column=s.column, descending=descending, nulls_first=nulls_first))
    return tuple(terms)


def managed_properties(table: Table) -> dict[str, str]:
    """Properties the table must carry: defaults, the user's, and tableflow's own markers.

    (`description` is not written as `comment`: Spark reserves that property name.)
    """
    upsert = UPSERT_TABLE_PROPERTIES if table.mode == "upsert" else {}
    # The history expiry keeps, stated as Iceberg's own properties, on tables that expire.
    expires = table.maintenance is not None and table.maintenance.expire_snapshots is not None
    history = table_history(table).properties() if expires else {}
    props = {**DEFAULT_TABLE_PROPERTIES, **history, **upsert, **table.properties}
    props[MODE_PROPERTY] = table.mode
    props[TOPIC_PROPERTY] = table.topic
    if table.mode == "upsert":
        props[KEY_PROPERTY] = ",".join(table.key_columns)
    return props


def _key_fields(table: Table, key_schema: pa.Schema | None) -> dict[str, pa.Field]:
    """The key's columns by name: a record key's fields, or a primitive key as the one key
    column (its type from the registry, or string/bytes)."""
    if key_schema is not None and key_schema.names != [PRIMITIVE_KEY_COLUMN]:
        return {f.name: f for f in key_schema}
    key_type = (
        key_schema.field(PRIMITIVE_KEY_COLUMN).type
        if key_schema is not None
        else _PRIMITIVE_KEY_TYPES.get(table.key.format)
    )
    if key_type is None or len(table.key_columns) != 1:
        return {}
    return {table.key_columns[0]: pa.field(table.key_columns[0], key_type)}


def _with_key_columns(table: Table, schema: pa.Schema, key_schema: pa.Schema | None) -> pa.Schema:
    """Upsert: key columns the value lacks come from the Kafka key (the value wins when
    it has them), appended after the value's columns."""
    # Dotted paths name fields of the value's structs: plan/column_checks.py checks them.
    missing = [c for c in table.key_columns if "." not in c and c not in schema.names]
    if not missing:
        return schema
    from_key = _key_fields(table, key_schema)
    absent = [c for c in missing if c not in from_key]
    if absent:
        raise ShapeError(
            f"key column(s) {absent} are neither fields of the value of topic "
            f"{table.topic!r} nor of its {table.key.format} key"
        )
    for name in missing:
        schema = schema.append(from_key[name].with_name(name).with_nullable(True))
    return schema


def desired_shape(table: Table, resolved: Any, key_schema: pa.Schema | None = None) -> TableShape:
    """The shape `table` must have, given its topic's resolved schema (a ResolvedSchema or a
    pa.Schema) and, for upsert tables with a registry key, the key's resolved schema."""
    schema: pa.Schema = resolved if isinstance(resolved, pa.Schema) else resolved.arrow_schema
    if table.mode == "upsert":
        schema = _with_key_columns(table, schema, key_schema)
    decoded = schema
    for step in SCHEMA_STEPS:
        schema = step(table, schema)
    return TableShape(
        schema=schema,
        partition_by=partition_terms(table),
        sort_by=sort_terms(table),
        mode=table.mode,
        key_columns=table.key_columns,
        properties=managed_properties(table),
        decoded_schema=decoded,
    )


def _transforms_step(table: Table, schema: pa.Schema) -> pa.Schema:
    """The table's columns after its transforms (raises ConfigError at file:line)."""
    if not table.transforms:
        return schema
    from tableflow_core.plan.compiled import compile_table_transforms

    return compile_table_transforms(table, schema).output_schema


def _position_step(table: Table, schema: pa.Schema) -> pa.Schema:
    """Upsert tables keep the Kafka position of the record each row comes from
    (`_kafka_timestamp`, `_kafka_partition`, `_kafka_offset`): the MERGE compares a
    record's with the stored row's, so one answer per key whatever the run boundaries
    (`ingest/upsert_order.py`). Declared metadata columns of those names are the
    same columns; a transform may not give them another type."""
    if table.mode != "upsert":
        return schema
    for name, data_type in POSITION_COLUMNS.items():
        if name not in schema.names:
            schema = schema.append(pa.field(name, data_type, nullable=True))
        elif not schema.field(name).type.equals(data_type):
            raise ShapeError(
                f"column {name} is {schema.field(name).type} after the transforms; an upsert "
                f"table keeps the Kafka position of each row's record there ({data_type}): "
                "leave it as it is"
            )
    return schema


SCHEMA_STEPS.append(_transforms_step)
SCHEMA_STEPS.append(_position_step)
