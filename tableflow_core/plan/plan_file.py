"""Saving and loading plans, and telling whether a saved plan is stale."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from tableflow_core.errors import TableflowError
from tableflow_core.plan.plan import PLAN_FORMAT_VERSION, Plan, TableFingerprint
from tableflow_core.plan.render_json import render_json

DERIVED_KEYS = ("summary", "has_changes")

# Fingerprint fields compared for staleness, with how to name them to a human.
FINGERPRINT_FIELDS: tuple[tuple[str, str], ...] = (
    ("exists", "table exists"),
    ("snapshot_id", "current snapshot id"),
    ("schema_id", "current schema id"),
    ("partition_spec_id", "partition spec id"),
    ("sort_order_id", "sort order id"),
    ("committed_offsets", "committed offsets"),
    ("registry_schema_id", "registry schema id"),
    ("registry_version", "registry schema version"),
    ("schema_fingerprint", "resolved schema"),
    ("key_registry_schema_id", "key registry schema id"),
    ("key_registry_version", "key registry schema version"),
)


class PlanFileError(TableflowError, ValueError):
    """The file is not a plan tableflow can apply."""


class StalePlanError(TableflowError, RuntimeError):
    """The world (or the project) changed since the plan was made."""

    changes_nothing = True

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__(
            "the saved plan is stale; run `tableflow plan` again:\n"
            + "\n".join(f"  - {r}" for r in reasons)
        )


def save_plan(plan: Plan, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(render_json(plan) + "\n")
    tmp.replace(path)


def load_plan(path: Path) -> Plan:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise PlanFileError(f"{path}: no such plan file") from exc
    except json.JSONDecodeError as exc:
        raise PlanFileError(f"{path}: not a JSON plan file ({exc})") from exc
    if not isinstance(document, dict) or "plan_format_version" not in document:
        raise PlanFileError(f"{path}: not a tableflow plan (no plan_format_version)")
    if document["plan_format_version"] != PLAN_FORMAT_VERSION:
        raise PlanFileError(
            f"{path}: plan format {document['plan_format_version']} is not supported "
            f"(this tableflow reads format {PLAN_FORMAT_VERSION})"
        )
    for key in DERIVED_KEYS:
        document.pop(key, None)
    try:
        return Plan.model_validate(document)
    except ValidationError as exc:
        raise PlanFileError(f"{path}: invalid plan file: {exc}") from exc


def stale_reasons(
    plan: Plan, current: Iterable[TableFingerprint], current_config_hash: str
) -> list[str]:
    """What differs between what the plan saw and what is there now (empty: fresh)."""
    reasons: list[str] = []
    if plan.config_hash != current_config_hash:
        reasons.append(
            "the project configuration of the planned tables or target changed since the plan was made"
        )
    now = {f.table: f for f in current}
    for seen in plan.fingerprints:
        found = now.get(seen.table)
        if found is None:
            reasons.append(f"table {seen.table}: no longer in the project")
            continue
        table_reasons = []
        for field, label in FINGERPRINT_FIELDS:
            before, after = getattr(seen, field), getattr(found, field)
            if before != after:
                table_reasons.append(
                    f"table {seen.table} ({seen.identifier}): {label} was {_show(before)}, now {_show(after)}"
                )
        if not table_reasons and seen.metadata_location != found.metadata_location:
            table_reasons.append(
                f"table {seen.table} ({seen.identifier}): table metadata changed "
                f"({seen.metadata_location} -> {found.metadata_location})"
            )
        reasons.extend(table_reasons)
    return reasons


def _show(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(value.items())) + "}"
    return str(value)
