"""What every config model shares: the strict, frozen base class, identifier and name
rules, durations and sizes."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from tableflow_core.config.names import namespace_problem, shown, topic_problem

IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"  # pydantic's (Rust) regex: `$` is the very end
DURATION_PATTERN = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
DURATION_UNITS_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
SIZE_PATTERN = re.compile(r"^\s*(\d+)\s*(B|KB|MB|GB|TB)?\s*$", re.IGNORECASE)
SIZE_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


def _checked_namespace(value: str | None) -> str | None:
    if value is not None and (problem := namespace_problem(value)):
        raise ValueError(f"invalid namespace {shown(value)}: {problem}")
    return value


def _checked_topic(value: str) -> str:
    if problem := topic_problem(value):
        raise ValueError(f"invalid topic name {shown(value)}: {problem}")
    return value


# The names apply uses: the catalog's rule for namespaces, Kafka's for topics.
NamespaceName = Annotated[str | None, AfterValidator(_checked_namespace)]
TopicName = Annotated[str, AfterValidator(_checked_topic)]


class ConfigModel(BaseModel):
    """Base for every config model: strict keys, immutable, documented."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def parse_duration_seconds(text: str) -> float:
    """'500ms', '30s', '5m', '1h', '1d' -> seconds."""
    match = DURATION_PATTERN.match(text)
    if not match:
        raise ValueError(
            f"invalid duration {text!r}: use a number and a unit (ms, s, m, h, d), e.g. '5m'"
        )
    return int(match.group(1)) * DURATION_UNITS_S[match.group(2)]


def parse_size_bytes(text: str) -> int:
    """'128MB', '1GB', '512KB', '1048576' -> bytes (binary units)."""
    match = SIZE_PATTERN.match(text)
    if not match:
        raise ValueError(
            f"invalid size {text!r}: use a number and a unit (B, KB, MB, GB), e.g. '128MB'"
        )
    return int(match.group(1)) * SIZE_UNITS[(match.group(2) or "B").upper()]


def check_duration(value: str | None) -> str | None:
    if value is not None:
        parse_duration_seconds(value)
    return value
