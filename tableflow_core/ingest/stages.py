"""A table's pipeline as data: typed stage specs, in the order the engine runs them.

    read_ranges -> decode -> transform* -> check* -> route_bad_records -> write -> publish

The planner emits them (pure, in the plan file and `plan --json`); the engine runs each
kind through the runner registered for its spec type (`pipeline/registry.py`, one module
per kind under `pipeline/runners/`). Adding a stage kind: a spec class here (and in
`Stage`), a runner module, and its line in the renderers (`label()`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tableflow_core.config.project import Table

Mode = Literal["append", "upsert"]
OnError = Literal["fail", "skip", "dlq"]


class StageSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def label(self) -> str:
        """One short line for `plan` output and the DAG."""
        return str(getattr(self, "kind", type(self).__name__))


class ReadRanges(StageSpec):
    """The planned offset ranges as a DataFrame, one row (one Spark task) per range."""

    kind: Literal["read_ranges"] = "read_ranges"


class Decode(StageSpec):
    """Read each range with confluent-kafka inside its task and decode it to Arrow (mapInArrow).

    Output: the table's columns, the hidden source position, and a bad-record struct.
    """

    kind: Literal["decode"] = "decode"
    value_format: str
    key_format: str | None = Field(None, description="Set when the key is decoded (upsert)")

    def label(self) -> str:
        key = f", key {self.key_format}" if self.key_format else ""
        return f"decode({self.value_format}{key})"


class Transform(StageSpec):
    """The table's transform number `index` (pipeline/runners/transform.py)."""

    kind: Literal["transform"] = "transform"
    index: int
    type: str
    description: str | None = Field(None, description="What it does, as plan shows it")

    def label(self) -> str:
        return f"transform({self.type})"


class Check(StageSpec):
    """The table's check number `index`, run on the batch before the write
    (pipeline/runners/check.py)."""

    kind: Literal["check"] = "check"
    index: int
    type: str
    severity: Literal["error", "warn"] = "error"
    description: str | None = Field(None, description="What it checks, as plan shows it")

    def label(self) -> str:
        return f"check({self.type})"


class RouteBadRecords(StageSpec):
    """Bad records (decode, transform, check rejects) go by `on_error`: fail the run,
    skip them, or write them to the dead-letter target."""

    kind: Literal["route_bad_records"] = "route_bad_records"
    on_error: OnError = "fail"
    dead_letter: str | None = None

    def label(self) -> str:
        return f"route_bad_records({self.on_error})"


class Write(StageSpec):
    """Write the good rows to the run's private branch: append, or MERGE by key (upsert)."""

    kind: Literal["write"] = "write"
    mode: Mode = "append"
    key_columns: tuple[str, ...] = ()

    def label(self) -> str:
        if self.mode == "upsert":
            return f"write(upsert, key {', '.join(self.key_columns)})"
        return "write(append)"


class Publish(StageSpec):
    """Run the branch's audits, then fast-forward main to the branch with the offsets."""

    kind: Literal["publish"] = "publish"


Stage = Annotated[
    ReadRanges | Decode | Transform | Check | RouteBadRecords | Write | Publish,
    Field(discriminator="kind"),
]


def table_stages(table: Table, compiled: Any = None) -> tuple[Stage, ...]:
    """The stages of one table's ingest, in order (pure). `compiled`: the table's
    CompiledTable (plan/compiled.py), for the transforms' and checks' descriptions."""
    transform_lines, check_lines = _descriptions(compiled)
    upsert = table.mode == "upsert"
    stages: list[Stage] = [
        ReadRanges(),
        Decode(value_format=table.value.format, key_format=table.key.format if upsert else None),
    ]
    stages.extend(
        Transform(index=i, type=t.type, description=transform_lines.get(i))
        for i, t in enumerate(table.transforms)
    )
    stages.extend(
        Check(index=i, type=c.type, severity=c.severity, description=check_lines.get(i))
        for i, c in enumerate(table.checks)
    )
    dead_letter = None
    if table.on_error == "dlq" and table.dlq is not None:
        dlq = table.dlq
        dead_letter = (
            f"kafka topic {dlq.topic}" if dlq.type == "kafka" else f"iceberg table {dlq.table}"
        )
    stages.append(RouteBadRecords(on_error=table.on_error, dead_letter=dead_letter))
    stages.append(Write(mode=table.mode, key_columns=table.key_columns))
    stages.append(Publish())
    return tuple(stages)


def _descriptions(compiled: Any) -> tuple[dict[int, str], dict[int, str]]:
    """Transform index -> its line; check index -> its lines (a check on several columns
    compiles to one check per column)."""
    if compiled is None:
        return {}, {}
    transforms = {i: step.describe() for i, step in enumerate(compiled.transforms.steps)}
    checks: dict[int, list[str]] = {}
    for check in compiled.checks.checks:
        index = int(check.key.split("[", 1)[1].split("]", 1)[0])
        checks.setdefault(index, []).append(check.describe())
    return transforms, {i: "; ".join(lines) for i, lines in checks.items()}
