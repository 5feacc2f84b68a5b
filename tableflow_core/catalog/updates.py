"""Checks of table metadata updates that pyiceberg's `update_table_metadata` leaves out.

The REST spec hands these rules to the server, and Iceberg's Java `TableMetadata.Builder`
enforces them: a schema's field ids are unique, a partition spec or sort order only
references columns of the current schema with a transform that fits their type, a
snapshot's parent exists and its manifest list lives under the table, statistics
belong to an existing snapshot, every location stays inside the warehouse. Each check
runs against the metadata as it stands *before* that update (earlier updates of the
same commit applied), the way the Java builder does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import singledispatch

from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSnapshotUpdate,
    AddSortOrderUpdate,
    RemovePropertiesUpdate,
    SetLocationUpdate,
    SetPartitionStatisticsUpdate,
    SetPropertiesUpdate,
    SetStatisticsUpdate,
    TableUpdate,
)
from pyiceberg.types import ListType, MapType, NestedField, StructType

from tableflow_core.catalog.errors import BadRequestError
from tableflow_core.catalog.locations import LocationPolicy

MAX_UPDATES_PER_COMMIT = 1000
MAX_COLUMNS = 10_000


def schema_problems(schema: Schema) -> list[str]:
    """Duplicate field ids, duplicate names at one level, unknown identifier fields, size."""
    problems: list[str] = []
    seen: set[int] = set()
    for count, field in enumerate(_all_fields(schema.as_struct()), start=1):
        if count > MAX_COLUMNS:
            return [f"schema has more than {MAX_COLUMNS} fields"]
        if field.field_id in seen:
            problems.append(f"duplicate field id {field.field_id}")
        seen.add(field.field_id)
    problems.extend(_duplicate_names(schema.as_struct()))
    missing_identifiers = [i for i in schema.identifier_field_ids if i not in seen]
    if missing_identifiers:
        problems.append(f"identifier field ids {missing_identifiers} are not in the schema")
    return problems


def _all_fields(struct: StructType) -> Iterator[NestedField]:
    stack: list[NestedField] = list(struct.fields)
    while stack:
        field = stack.pop()
        yield field
        stack.extend(_children(field.field_type))


def _children(field_type: object) -> list[NestedField]:
    if isinstance(field_type, StructType):
        return list(field_type.fields)
    if isinstance(field_type, ListType):
        return [field_type.element_field]
    if isinstance(field_type, MapType):
        return [field_type.key_field, field_type.value_field]
    return []


def _duplicate_names(root: StructType) -> list[str]:
    structs = [
        root,
        *(f.field_type for f in _all_fields(root) if isinstance(f.field_type, StructType)),
    ]
    problems: list[str] = []
    for struct in structs:
        names = [f.name for f in struct.fields]
        problems.extend(
            f"duplicate field name {name!r}"
            for name in sorted({n for n in names if names.count(n) > 1})
        )
    return problems


def check_schema(schema: Schema, what: str = "schema") -> None:
    if problems := schema_problems(schema):
        raise BadRequestError(f"Invalid {what}: {'; '.join(problems)}")


def check_transforms(schema: Schema, fields: Sequence[tuple[int, object, str]], what: str) -> None:
    """Each `(source_id, transform, label)` names a column of `schema` the transform fits."""
    for source_id, transform, label in fields:
        try:
            column = schema.find_field(source_id)
        except ValueError:
            raise BadRequestError(
                f"Invalid {what}: {label} references column id {source_id}, "
                f"which is not in schema {schema.schema_id}"
            ) from None
        can_transform = getattr(transform, "can_transform", None)
        if can_transform is not None and not can_transform(column.field_type):
            raise BadRequestError(
                f"Invalid {what}: {label} cannot apply {transform} to column "
                f"{column.name!r} of type {column.field_type}"
            )


# ---------------------------------------------------------------- per update


@dataclass
class _CommitState:
    """What earlier updates of the commit added, on top of the base metadata."""

    base: TableMetadata
    snapshot_ids: set[int] = dataclasses.field(default_factory=set)
    schema_ids: set[int] = dataclasses.field(default_factory=set)
    property_keys: set[str] = dataclasses.field(default_factory=set)

    def __post_init__(self) -> None:
        self.snapshot_ids |= {s.snapshot_id for s in self.base.snapshots}
        self.schema_ids |= {s.schema_id for s in self.base.schemas}
        self.property_keys |= set(self.base.properties)


@singledispatch
def _check(update: object, state: _CommitState, policy: LocationPolicy) -> TableUpdate | None:
    """Check one update in order; record what it adds; return a replacement or None."""
    return None


@_check.register
def _(update: AddSchemaUpdate, state: _CommitState, policy: LocationPolicy) -> None:
    check_schema(update.schema_, "add-schema")
    state.schema_ids.add(update.schema_.schema_id)


@_check.register
def _(update: AddSnapshotUpdate, state: _CommitState, policy: LocationPolicy) -> None:
    snapshot = update.snapshot
    parent = snapshot.parent_snapshot_id
    if parent is not None and parent not in state.snapshot_ids:
        raise BadRequestError(
            f"Invalid add-snapshot: parent snapshot {parent} does not exist in the table"
        )
    if snapshot.schema_id is not None and snapshot.schema_id not in state.schema_ids:
        raise BadRequestError(f"Invalid add-snapshot: schema {snapshot.schema_id} does not exist")
    if snapshot.manifest_list is not None:
        policy.check(snapshot.manifest_list, "add-snapshot manifest-list")
    state.snapshot_ids.add(snapshot.snapshot_id)


@_check.register
def _(update: SetStatisticsUpdate, state: _CommitState, policy: LocationPolicy) -> None:
    _check_statistics(update.statistics.snapshot_id, state)
    policy.check(update.statistics.statistics_path, "set-statistics path")


@_check.register
def _(update: SetPartitionStatisticsUpdate, state: _CommitState, policy: LocationPolicy) -> None:
    _check_statistics(update.partition_statistics.snapshot_id, state)
    policy.check(update.partition_statistics.statistics_path, "set-partition-statistics path")


@_check.register
def _(update: SetLocationUpdate, state: _CommitState, policy: LocationPolicy) -> None:
    policy.check(update.location, "set-location")


@_check.register
def _(update: SetPropertiesUpdate, state: _CommitState, policy: LocationPolicy) -> None:
    policy.check_properties(update.updates, "set-properties")
    state.property_keys |= set(update.updates)


@_check.register
def _(
    update: RemovePropertiesUpdate, state: _CommitState, policy: LocationPolicy
) -> RemovePropertiesUpdate:
    # Iceberg's builder ignores keys that are not set (pyiceberg raises a KeyError).
    present = [key for key in update.removals if key in state.property_keys]
    state.property_keys -= set(present)
    return RemovePropertiesUpdate(removals=present)


def _check_statistics(snapshot_id: int, state: _CommitState) -> None:
    if snapshot_id not in state.snapshot_ids:
        raise BadRequestError(f"Invalid statistics: snapshot {snapshot_id} does not exist")


def _check_against_final(
    updates: Sequence[TableUpdate], final: TableMetadata, policy: LocationPolicy
) -> None:
    """Rules that need the commit's resulting schema and location."""
    schema = final.schema()
    roots = [r for r in (final.location, final.properties.get("write.metadata.path")) if r]
    table_files = LocationPolicy.for_warehouse(roots[0], roots[1:]) if roots else policy
    for update in updates:
        if isinstance(update, AddPartitionSpecUpdate):
            fields = update.spec.fields
            if len({f.name for f in fields}) != len(fields):
                raise BadRequestError("Invalid add-spec: partition field names must be unique")
            check_transforms(
                schema,
                [(f.source_id, f.transform, f"partition field {f.name!r}") for f in fields],
                "add-spec",
            )
        elif isinstance(update, AddSortOrderUpdate):
            check_transforms(
                schema,
                [(f.source_id, f.transform, "sort field") for f in update.sort_order.fields],
                "add-sort-order",
            )
        for path, what in _file_paths(update):
            if not table_files.allows(path):
                raise BadRequestError(
                    f"Invalid {what}: files of a table must be under its location"
                )


def _file_paths(update: TableUpdate) -> list[tuple[str, str]]:
    if isinstance(update, AddSnapshotUpdate) and update.snapshot.manifest_list is not None:
        return [(update.snapshot.manifest_list, "add-snapshot manifest-list")]
    if isinstance(update, SetStatisticsUpdate):
        return [(update.statistics.statistics_path, "set-statistics path")]
    if isinstance(update, SetPartitionStatisticsUpdate):
        return [(update.partition_statistics.statistics_path, "set-partition-statistics path")]
    return []


def checked_updates(
    base: TableMetadata,
    updates: Sequence[TableUpdate],
    policy: LocationPolicy,
) -> tuple[TableUpdate, ...]:
    """`updates` checked one by one (BadRequestError if not valid), with harmless fixes applied.

    The rules on the resulting metadata are `check_result`'s, once the caller applied them.
    """
    if len(updates) > MAX_UPDATES_PER_COMMIT:
        raise BadRequestError(f"A commit may hold at most {MAX_UPDATES_PER_COMMIT} updates")
    state = _CommitState(base)
    result: list[TableUpdate] = []
    for update in updates:
        replacement = _check(update, state, policy)
        result.append(replacement if replacement is not None else update)
    return tuple(result)


def check_result(
    updates: Sequence[TableUpdate], final: TableMetadata, policy: LocationPolicy
) -> None:
    """The metadata `updates` produced keeps its location, properties and files allowed."""
    policy.check(final.location, "table location")
    policy.check_properties(final.properties, "table")
    _check_against_final(updates, final, policy)
