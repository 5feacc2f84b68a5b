"""The component a failure names: the `cause` label of failed cycles, and readiness.

Errors reach `tableflow run` as text (redacted, as the console shows them): each names
what failed in its own words (`kafka at 127.0.0.1:9092 is not reachable`,
`KafkaReadError: topic ...`, `CatalogUnavailableError: ...`). The first rule that
matches gives the cause; the label is one of `CAUSES`, never the text itself.
"""

from __future__ import annotations

import re

from tableflow_core.runner.actions import SUSPENDED_MARK

# Components a table needs to be refreshed: a failure naming one of them means the table's
# last cycle did not reach it (`/readyz`).
COMPONENTS: tuple[str, ...] = ("kafka", "registry", "catalog", "storage", "spark")
CAUSES: tuple[str, ...] = (*COMPONENTS, "data", "maintenance", "other")

# In order: the first match wins (a Spark job failing on a Kafka read is Kafka's).
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("data", re.compile(re.escape(SUSPENDED_MARK))),
    (
        "kafka",
        re.compile(
            r"\bkafka at\b|Kafka(?:Unreachable|Read|Metadata)Error|KafkaException|KafkaError|"
            r"_TRANSPORT|_ALL_BROKERS_DOWN|\bbroker\b",
            re.IGNORECASE,
        ),
    ),
    (
        "registry",
        re.compile(r"schema registry|Registry(?:Unreachable|Unavailable)|SchemaRegistry", re.I),
    ),
    (
        "catalog",
        re.compile(
            r"\bcatalog at\b|CatalogUnavailableError|CommitStateUnknown|\bRESTError\b|"
            r"\bServerError\b|\bcatalog\b",
            re.IGNORECASE,
        ),
    ),
    (
        "storage",
        re.compile(
            r"\bs3a?://|\bS3\b|object stor|NoSuchBucket|\bstorage\b|No space left|"
            r"PermissionError|FileNotFoundError",
            re.IGNORECASE,
        ),
    ),
    ("spark", re.compile(r"Py4J|SparkException|\bspark\b|\bJVM\b", re.IGNORECASE)),
    (
        "data",
        re.compile(
            r"IngestError|AccountingError|DataLossError|bad record|could not be decoded|"
            r"\bcheck\b",
            re.IGNORECASE,
        ),
    ),
)


def failure_cause(error: str) -> str:
    """The cause (one of CAUSES) of a failure described by `error`."""
    if error.startswith("maintenance: "):
        cause = failure_cause(error.removeprefix("maintenance: "))
        return "maintenance" if cause == "other" else cause
    for cause, pattern in _RULES:
        if pattern.search(error):
            return cause
    return "other"


def is_component(cause: str) -> bool:
    return cause in COMPONENTS
