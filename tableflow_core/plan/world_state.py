"""The world as the planner saw it: plain immutable values, no I/O.

`plan.world` fills these from the catalog, the registry and Kafka; unit tests
build them by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tableflow_core.maintenance.activity import TableActivity
from tableflow_core.plan.actions import PartitionTerm, SortTerm


@dataclass(frozen=True)
class ObservedTable:
    """An existing Iceberg table."""

    identifier: str
    schema: Any  # pyiceberg.schema.Schema
    schema_id: int
    partition_spec_id: int = 0
    partition_by: tuple[PartitionTerm, ...] = ()
    sort_order_id: int = 0
    sort_by: tuple[SortTerm, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    snapshot_id: int | None = None
    metadata_location: str | None = None
    committed: Mapping[int, int] | None = None  # partition -> next offset; None: never ingested
    activity: TableActivity | None = None  # what its commits wrote (maintenance triggers)


@dataclass(frozen=True)
class TopicState:
    topic: str
    watermarks: Mapping[int, tuple[int, int]]  # partition -> (low, high)
    offsets_for_time: Mapping[int, int] | None = None  # for `start_from: {timestamp}`


def key_arrow_schema(key_schemas: Mapping[str, Any], table: str) -> Any:
    """The Arrow schema of an upsert table's registry key (None: no registry key)."""
    resolved = key_schemas.get(table)
    return resolved.arrow_schema if resolved is not None else None


@dataclass(frozen=True)
class WorldState:
    namespaces: frozenset[tuple[str, ...]] = frozenset()
    tables: Mapping[str, ObservedTable] = field(default_factory=dict)  # by `ns.table`
    # Every table identifier found in the namespaces the project uses (for undeclared tables).
    listed_tables: frozenset[str] = frozenset()
    schemas: Mapping[str, Any] = field(default_factory=dict)  # table name -> ResolvedSchema
    # Upsert tables with a registry-encoded key: table name -> the key subject's
    # ResolvedSchema (`.arrow_schema` shapes the key columns; id/version feed staleness).
    key_schemas: Mapping[str, Any] = field(default_factory=dict)
    topics: Mapping[str, TopicState] = field(default_factory=dict)
    # Tables with `publish_to`: table name -> {publish catalog -> pointer (None: not there)}.
    published: Mapping[str, Mapping[str, str | None]] = field(default_factory=dict)
    # Tables whose published pointers could not be read: table name -> the (redacted) error.
    publish_errors: Mapping[str, str] = field(default_factory=dict)
    # Existing Iceberg dead-letter tables: `ns.table` -> their column names.
    dlq_tables: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Kafka dead-letter topics looked at: topic -> partition count (None: does not exist).
    dlq_topics: Mapping[str, int | None] = field(default_factory=dict)
    # Per-table problems found while reading (subject missing, topic missing, ...).
    problems: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Source topics the broker does not have, and (only when some are missing) the topics
    # it has, to suggest a close name.
    missing_topics: frozenset[str] = frozenset()
    broker_topics: frozenset[str] = frozenset()
