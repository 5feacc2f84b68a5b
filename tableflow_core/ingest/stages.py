"""A table's pipeline as data: typed stage specs, in the order the engine runs them.

    read_ranges -> decode -> transform? -> check? -> route_bad_records -> write -> publish

The planner emits them (pure, in the plan file and `plan --json`: `plan/ingest_spec.py`);
the engine runs each kind through the runner registered for its spec type
(`pipeline/registry.py`, one module per kind under `pipeline/runners/`). A stage shows
what runs in it: the decode stage the steps fused into the read tasks (masks, an
append table's dedup, the key reports proving `unique` checks), the transform stage the
steps Spark runs, in the order it runs them (`ingest/placement.py`). Adding a stage
kind: a spec class here (and in `Stage`), a runner module, and its line in the renderers
(`label()`, `details()`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Mode = Literal["append", "upsert"]
OnError = Literal["fail", "skip", "dlq"]


class StageSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def label(self) -> str:
        """One short line for `plan` output and the DAG."""
        return str(getattr(self, "kind", type(self).__name__))

    def details(self) -> tuple[str, ...]:
        """What runs inside the stage, one line each (`plan` prints them under the
        pipeline line)."""
        return ()


class StepLine(BaseModel):
    """One step of the table's chain or one check, as `plan` shows it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = Field(description="mask, dedup, filter, derive, rename, drop; or the check's type")
    text: str = Field(description="What it does")


def _kinds(steps: tuple[StepLine, ...]) -> str:
    return ", ".join(dict.fromkeys(step.kind for step in steps))


class ReadRanges(StageSpec):
    """The planned offset ranges as a DataFrame, one row (one Spark task) per range."""

    kind: Literal["read_ranges"] = "read_ranges"


class Decode(StageSpec):
    """Read each range with confluent-kafka inside its task and decode it to Arrow (mapInArrow).

    Output: the table's columns, the hidden source position, and a bad-record struct.
    `fused`: steps of the table's chain and checks that run inside these read tasks.
    """

    kind: Literal["decode"] = "decode"
    value_format: str
    key_format: str | None = Field(None, description="Set when the key is decoded (upsert)")
    fused: tuple[StepLine, ...] = Field(
        (), description="Steps that run inside the read tasks, while decoding"
    )

    def label(self) -> str:
        key = f", key {self.key_format}" if self.key_format else ""
        fused = f" + {_kinds(self.fused)}" if self.fused else ""
        return f"decode({self.value_format}{key}{fused})"

    def details(self) -> tuple[str, ...]:
        return tuple(f"decode: {step.text}" for step in self.fused)


class Transform(StageSpec):
    """The table's transforms that run on Spark, as one projection, in `steps` order
    (pipeline/runners/transform.py); the steps fused into decode are not among them."""

    kind: Literal["transform"] = "transform"
    steps: tuple[StepLine, ...] = Field((), description="Steps Spark runs, in order")

    def label(self) -> str:
        return f"transform({_kinds(self.steps)})" if self.steps else "transform"

    def details(self) -> tuple[str, ...]:
        return tuple(f"transform: {step.text}" for step in self.steps)


class Check(StageSpec):
    """The table's checks, run as one validation before publish (pipeline/runners/check.py)."""

    kind: Literal["check"] = "check"
    checks: tuple[StepLine, ...] = Field(description="Each check, with what a failure does")

    def label(self) -> str:
        return f"check({_kinds(self.checks)})"

    def details(self) -> tuple[str, ...]:
        return tuple(check.text for check in self.checks)  # "check not_null(id) (...)"


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
