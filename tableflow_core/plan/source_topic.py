"""The blocker for a table whose topic the broker does not have (pure).

It points at the table's `topic:` line and says what to do: a close name when the broker
has one (`ordres` -> `orders`), else produce to the topic first or create it.
"""

from __future__ import annotations

from tableflow_core.config.project import Project, Table
from tableflow_core.config.validation import did_you_mean
from tableflow_core.plan.actions import Blocker

# Beyond this many topics, listing them is noise.
MAX_LISTED = 10


def missing_topic_blocker(project: Project, table: Table, broker_topics: frozenset[str]) -> Blocker:
    address = project.target.kafka.bootstrap_servers
    message = f"topic {table.topic!r} does not exist on kafka at {address}"
    close = did_you_mean(table.topic, sorted(broker_topics))
    if close is not None:
        message += f"; did you mean {close!r}?"
    else:
        message += "; produce to it first, or create it"
        if project.target.dev_stack is not None:
            message += (
                f" (on the local stack, `tableflow dev produce orders --topic {table.topic}` "
                "fills it with sample orders)"
            )
        if 0 < len(broker_topics) <= MAX_LISTED:
            message += f". Topics on the broker: {', '.join(sorted(broker_topics))}"
    return Blocker.at(table, "topic", "invalid", message)
