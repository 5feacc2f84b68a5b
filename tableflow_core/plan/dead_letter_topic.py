"""The Kafka dead-letter topic in a plan: create it when it is missing (pure).

A table whose bad records may go to a Kafka topic (`on_error: dlq`, or a check with
`on_failure: dlq`) needs that topic. When the broker does not have it, the plan shows
`+ dead-letter topic <name>` and apply creates it, with as many partitions as the
source topic (the largest, when several tables share the dead-letter topic) and the
broker's default replication factor. A dead-letter topic that is also a table's source
topic is refused at the `dlq` key's file:line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tableflow_core.config.models.dead_letter import KafkaDeadLetter
from tableflow_core.config.project import Table
from tableflow_core.plan.actions import Blocker, CreateTopic

DLQ_TOPIC_ACTION_PREFIX = "create_dlq_topic:"


def routes_to_dead_letter(table: Table) -> bool:
    """Whether any bad record of the table can reach its dead-letter target."""
    if table.on_error == "dlq":
        return True
    return any(getattr(check, "on_failure", None) == "dlq" for check in table.checks)


def kafka_dlq_users(tables: Iterable[Table]) -> dict[str, list[Table]]:
    """{dead-letter topic: the project tables that may write to it}."""
    users: dict[str, list[Table]] = {}
    for table in tables:
        if isinstance(table.dlq, KafkaDeadLetter) and routes_to_dead_letter(table):
            users.setdefault(table.dlq.topic, []).append(table)
    return users


def dlq_topic_actions(
    tables: Iterable[Table],
    source_partitions: Mapping[str, int],
    dlq_topics: Mapping[str, int | None],
) -> tuple[list[CreateTopic], list[Blocker]]:
    """Actions creating missing Kafka dead-letter topics, and blockers for unusable ones.

    `source_partitions`: partition count of each source topic the plan read.
    `dlq_topics`: what the broker said of each dead-letter topic: its partition count,
    None when it does not exist (a topic not in the mapping was not looked at).
    """
    tables = list(tables)
    sources = {t.topic: t for t in tables}
    actions: list[CreateTopic] = []
    blockers: list[Blocker] = []
    for topic, users in sorted(kafka_dlq_users(tables).items()):
        if topic in sources:
            message = (
                f"dead-letter topic {topic!r} is also the source topic of table "
                f"{sources[topic].name!r}; its bad records would be read again"
            )
            blockers.append(Blocker.at(users[0], "dlq", "invalid", message))
            continue
        if topic not in dlq_topics or dlq_topics[topic] is not None:
            continue
        counts = {
            t.topic: source_partitions[t.topic] for t in users if t.topic in source_partitions
        }
        if not counts:
            continue  # the source topic could not be read: that table already has a blocker
        source = max(sorted(counts), key=lambda name: counts[name])
        actions.append(
            CreateTopic(
                id=f"{DLQ_TOPIC_ACTION_PREFIX}{topic}",
                identifier=topic,
                partitions=counts[source],
                like_topic=source,
                used_by=tuple(sorted(t.name for t in users)),
            )
        )
    return actions, blockers
