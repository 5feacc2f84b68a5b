"""Dead-letter targets (`dlq:`): where bad records go, and what their rows keep."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from tableflow_core.config.models.base import ConfigModel
from tableflow_core.config.names import namespace_problem, shown, topic_problem

# Matched with fullmatch: `$` alone also accepts a trailing newline.
QUALIFIED_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


DeadLetterPayload = Literal["raw", "masked"]


def _payload_field() -> Any:
    return Field(
        None,
        description="What a bad record's row keeps of the record. `raw`: its key, value and "
        "headers as they were on the topic (clear values of masked columns included; "
        "replayable). `masked`: no key or value bytes; a record that decoded keeps its row "
        "as JSON with the table's masks applied, an undecodable one only its position, "
        "headers and error. Default: masked for a table with masks, raw otherwise "
        "(docs/error-handling.md).",
    )


class KafkaDeadLetter(ConfigModel):
    type: Literal["kafka"]
    topic: str = Field(
        description="Topic receiving each bad record's original key, value and headers plus "
        "`tableflow.error.*` headers (at-least-once; see docs/error-handling.md). Created by "
        "plan/apply when missing, with the source topic's partition count.",
    )
    payload: DeadLetterPayload | None = _payload_field()

    @field_validator("topic")
    @classmethod
    def _valid_topic(cls, value: str) -> str:
        if problem := topic_problem(value):
            raise ValueError(f"invalid dead-letter topic name {shown(value)}: {problem}")
        return value


class IcebergDeadLetter(ConfigModel):
    type: Literal["iceberg"]
    table: str = Field(
        description="`namespace.table` receiving bad records with error columns; created by "
        "plan/apply, written idempotently.",
    )
    payload: DeadLetterPayload | None = _payload_field()

    @field_validator("table")
    @classmethod
    def _qualified(cls, value: str) -> str:
        if not QUALIFIED_TABLE.fullmatch(value):
            raise ValueError(
                f"invalid dead-letter table {shown(value)}: write it as `namespace.table` "
                "(identifiers of letters, digits and underscores)"
            )
        if problem := namespace_problem(value):
            raise ValueError(f"invalid dead-letter table {shown(value)}: {problem}")
        return value


DeadLetterTarget = Annotated[KafkaDeadLetter | IcebergDeadLetter, Field(discriminator="type")]
