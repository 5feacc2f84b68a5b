"""Config values the builder and the engine both need (pure). A table's desired shape is
`pipeline.shape.desired_shape`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields, is_dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from tableflow_core.config.models.formats import Format
from tableflow_core.config.models.tables import StartFrom
from tableflow_core.config.project import Project, Table
from tableflow_core.schemas.formats import FormatSpec, JsonColumn

# Iceberg consumes these at creation; they never appear as properties afterwards.
RESERVED_PROPERTIES = frozenset({"format-version"})


def comparable_properties(props: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in props.items() if k not in RESERVED_PROPERTIES}


def start_from_value(table: Table) -> Literal["earliest", "latest"] | int:
    """`earliest`, `latest` or a timestamp in epoch milliseconds."""
    if isinstance(table.start_from, StartFrom):
        moment = datetime.fromisoformat(table.start_from.timestamp.replace("Z", "+00:00"))
        return int(moment.timestamp() * 1000)
    return table.start_from


def format_spec(fmt: Format) -> Any:
    """config `Format` -> DECODING's `FormatSpec`."""

    columns = (
        tuple(JsonColumn(name=c.name, type=c.type, path=c.path) for c in fmt.columns)
        if fmt.columns is not None
        else None
    )
    return FormatSpec(
        format=fmt.format,
        subject=fmt.subject,
        version=fmt.version,
        message=fmt.message,
        json_columns=columns,
        envelope=fmt.envelope,
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _jsonable(getattr(value, f.name))
            for f in fields(value)
            if f.name not in ("source", "key_lines")
        }
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def config_hash(project: Project, tables: tuple[Table, ...]) -> str:
    """sha256 of what a plan depends on: the target's settings and the selected tables.

    Secrets are masked by pydantic's JSON dump, so rotating a password does not make
    a plan stale (and the hash never encodes a secret).
    """
    document = {
        "project": project.name,
        "target": project.target_name,
        "target_config": _jsonable(project.target),
        "tables": [_jsonable(t) for t in sorted(tables, key=lambda t: t.name)],
    }
    encoded = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(encoded.encode()).hexdigest()
