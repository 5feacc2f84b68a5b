"""The Iceberg dead-letter table in a plan: its desired schema and the actions (pure).

Several project tables may share one dead-letter table; it is created once. The plan
builder calls `dlq_table_actions` with what it observed and adds the result to the plan
(before the ingest actions of the tables that write to it).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from tableflow_core.config.models.dead_letter import IcebergDeadLetter
from tableflow_core.config.project import Table
from tableflow_core.ingest.bad_records import BAD_RECORD_SCHEMA, DLQ_KEY_COLUMNS, dlq_properties
from tableflow_core.plan.actions import Blocker, Column, CreateNamespace, CreateTable, SortTerm

DLQ_ACTION_PREFIX = "create_dlq_table:"
DLQ_SORT: tuple[SortTerm, ...] = tuple(SortTerm(column=c) for c in DLQ_KEY_COLUMNS[:3])


def dlq_columns() -> tuple[Column, ...]:
    return tuple(
        Column(name=f.name, type=str(f.type), required=not f.nullable) for f in BAD_RECORD_SCHEMA
    )


def iceberg_dlq_users(tables: Iterable[Table]) -> dict[str, list[Table]]:
    """{dead-letter table identifier: the project tables writing to it}."""
    users: dict[str, list[Table]] = {}
    for table in tables:
        if isinstance(table.dlq, IcebergDeadLetter):
            users.setdefault(table.dlq.table, []).append(table)
    return users


def is_dlq_action(action: object) -> bool:
    return isinstance(action, CreateTable) and action.id.startswith(DLQ_ACTION_PREFIX)


def dlq_table_actions(
    tables: Iterable[Table],
    existing_tables: Mapping[str, Collection[str]],
    existing_namespaces: Collection[tuple[str, ...]],
) -> tuple[list[CreateNamespace | CreateTable], list[Blocker]]:
    """Actions creating missing dead-letter tables, and blockers for unusable ones.

    `existing_tables`: identifier -> column names of tables the catalog already has
    (a dead-letter table that exists with other columns is refused, not altered).
    `existing_namespaces`: namespaces that exist or that the plan already creates.
    """
    tables = list(tables)
    data_tables = {t.identifier: t for t in tables}
    actions: list[CreateNamespace | CreateTable] = []
    blockers: list[Blocker] = []
    planned_namespaces = set(existing_namespaces)
    wanted_columns = [f.name for f in BAD_RECORD_SCHEMA]
    for identifier, users in sorted(iceberg_dlq_users(tables).items()):
        if identifier in data_tables:
            message = (
                f"dead-letter table {identifier} is also the data table of "
                f"{data_tables[identifier].name!r}; give the dead-letter table its own name"
            )
            blockers.append(Blocker.at(users[0], "dlq", "invalid", message))
            continue
        if identifier in existing_tables:
            columns = list(existing_tables[identifier])
            if columns != wanted_columns:
                message = (
                    f"dead-letter table {identifier} exists with columns {columns}, "
                    f"not the dead-letter columns {wanted_columns}"
                )
                blockers.append(Blocker.at(users[0], "dlq", "invalid", message))
            continue
        namespace = tuple(identifier.split(".")[:-1])
        if namespace not in planned_namespaces:
            planned_namespaces.add(namespace)
            actions.append(
                CreateNamespace(
                    id=f"create_namespace:{'.'.join(namespace)}", identifier=".".join(namespace)
                )
            )
        actions.append(
            CreateTable(
                id=f"{DLQ_ACTION_PREFIX}{identifier}",
                table=None,
                identifier=identifier,
                columns=dlq_columns(),
                table_schema=BAD_RECORD_SCHEMA,
                sort_by=DLQ_SORT,
                properties=dlq_properties(t.name for t in users),
            )
        )
    return actions, blockers
