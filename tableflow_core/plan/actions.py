"""Typed, immutable plan actions.

Each action is a pydantic model with a `kind` discriminator so a plan round-trips
through JSON (saved plans, `plan --json`) without losing its types. `change` is the
Terraform-style effect: create (+), update (~), replace (-/+), delete (-), read (>)
for ingestion and report (?) for things shown but never done.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from tableflow_core.config.models.maintenance import DeletesRewriteBudget
from tableflow_core.config.project import Table
from tableflow_core.ingest.spec import IngestSpec
from tableflow_core.ingest.stages import Mode, OnError, RouteBadRecords, Stage
from tableflow_core.ingest.terms import PartitionTerm, SortTerm
from tableflow_core.kafka.offsets import lost_offsets_text
from tableflow_core.schemas.arrow_json import ArrowSchema
from tableflow_core.schemas.changes import SchemaChange

__all__ = ["PartitionTerm", "SortTerm"]  # one representation: ingest/terms.py

Change = Literal["create", "update", "replace", "delete", "read", "report"]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Column(Frozen):
    """A column of a table to create (top level; nested types shown as their type text)."""

    name: str
    type: str
    required: bool = False


class OffsetSpan(Frozen):
    """Offsets [start, end) of one partition that the run will read."""

    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class PartitionLag(Frozen):
    """Where one partition stands: committed offset, broker end offset, what a run reads."""

    partition: int
    committed: int | None = Field(description="Next offset the table will read; null = never read")
    low_watermark: int
    high_watermark: int
    start: int = Field(description="First offset this run reads")
    read_to: int = Field(description="Offset after the last one this run reads")

    @property
    def lag(self) -> int:
        return max(0, self.high_watermark - self.start)

    @property
    def to_read(self) -> int:
        return max(0, self.read_to - self.start)


class ActionBase(Frozen):
    id: str = Field(description="Unique within the plan, e.g. `create_table:orders`")
    table: str | None = Field(None, description="The project's table name, if any")
    identifier: str = Field(description="What the action touches: `namespace.table` or namespace")

    @classmethod
    def on_table(cls, table: Table, **fields: Any) -> Self:
        """This action on the project's `table`: its id is `<kind>:<table name>`."""
        kind = cls.model_fields["kind"].default
        return cls(
            id=f"{kind}:{table.name}", table=table.name, identifier=table.identifier, **fields
        )


class CreateNamespace(ActionBase):
    kind: Literal["create_namespace"] = "create_namespace"
    change: Literal["create"] = "create"


TABLE_SCHEMA = "The table's exact columns (Arrow), as apply creates them; `columns` shows them"


class TableDefinition(ActionBase):
    """An action that makes a table from its definition: `CreateTable`, or `ReplaceTable`
    after the drop. (`kind` and `change` are each action's own literals.)"""

    kind: str
    change: Change
    columns: tuple[Column, ...]
    table_schema: ArrowSchema = Field(description=TABLE_SCHEMA)
    partition_by: tuple[PartitionTerm, ...] = ()
    sort_by: tuple[SortTerm, ...] = ()
    properties: dict[str, str] = Field(default_factory=dict)
    deletes_rewrite_budget: DeletesRewriteBudget | None = Field(
        None,
        description="An upsert table's `maintenance: deletes_rewrite_budget` (null: not an "
        "upsert table)",
    )


class CreateTable(TableDefinition):
    kind: Literal["create_table"] = "create_table"
    change: Literal["create"] = "create"


class CreateTopic(ActionBase):
    """Create a missing Kafka dead-letter topic (`identifier` is the topic's name)."""

    kind: Literal["create_topic"] = "create_topic"
    change: Literal["create"] = "create"
    partitions: int = Field(ge=1, description="Partitions: as many as the source topic's")
    like_topic: str = Field(description="The source topic whose partition count it takes")
    used_by: tuple[str, ...] = Field((), description="Project tables dead-lettering to it")


class EvolveSchema(ActionBase):
    kind: Literal["evolve_schema"] = "evolve_schema"
    change: Literal["update"] = "update"
    changes: tuple[SchemaChange, ...]
    table_schema: ArrowSchema = Field(
        description="The table's exact columns (Arrow) after the changes: their types"
    )


class UpdateProperties(ActionBase):
    kind: Literal["update_properties"] = "update_properties"
    change: Literal["update"] = "update"
    set: dict[str, str] = Field(description="Properties set to these values")
    previous: dict[str, str | None] = Field(description="Their values before (null = unset)")


class ChangePartitionSpec(ActionBase):
    kind: Literal["change_partition_spec"] = "change_partition_spec"
    change: Literal["update"] = "update"
    current: tuple[PartitionTerm, ...]
    desired: tuple[PartitionTerm, ...]


class ChangeSortOrder(ActionBase):
    kind: Literal["change_sort_order"] = "change_sort_order"
    change: Literal["update"] = "update"
    current: tuple[SortTerm, ...]
    desired: tuple[SortTerm, ...]


class ReplaceTable(TableDefinition):
    """Destructive: drop and recreate (data and committed offsets are lost)."""

    kind: Literal["replace_table"] = "replace_table"
    change: Literal["replace"] = "replace"
    reasons: tuple[str, ...]


class UndeclaredTable(ActionBase):
    """A table in the project's namespaces the project does not declare: reported only."""

    kind: Literal["undeclared_table"] = "undeclared_table"
    change: Literal["report"] = "report"


class DropTable(ActionBase):
    """An undeclared table dropped because `--prune` was given."""

    kind: Literal["drop_table"] = "drop_table"
    change: Literal["delete"] = "delete"


class LostOffsets(OffsetSpan):
    """Offsets [start, end) of one partition the table was due to read that are gone from
    the topic (deleted by retention or `delete_records` before it read them)."""


class Ingest(ActionBase):
    """Read new records of `topic` into the table."""

    kind: Literal["ingest"] = "ingest"
    change: Literal["read"] = "read"
    topic: str
    partitions: tuple[PartitionLag, ...]
    ranges: tuple[OffsetSpan, ...] = Field(
        description="Offset ranges the run reads, split per Spark task"
    )
    records: int = Field(description="Records this run reads (after max_records_per_run)")
    pending: int = Field(description="Records waiting in the topic (lag)")
    checks: tuple[str, ...] = Field(default=(), description="Quality checks that will run")
    dead_letter: str | None = Field(None, description="Where bad records go, if anywhere")
    warnings: tuple[str, ...] = ()
    lost: tuple[LostOffsets, ...] = Field(
        default=(),
        description="Offsets the table was due to read that are gone from the topic; apply "
        "reads on from the log start only with on_data_loss accept",
    )
    on_data_loss: Literal["fail", "accept"] = Field(
        "fail", description="The table's policy for `lost` offsets"
    )
    spec: IngestSpec = Field(
        description="Everything the run needs, as apply runs it: mode, on_error, columns, "
        "stages, compiled transforms and checks (not the target's connections or secrets)"
    )

    @property
    def mode(self) -> Mode:
        return self.spec.mode

    @property
    def key_columns(self) -> tuple[str, ...]:
        return self.spec.key_columns

    @property
    def stages(self) -> tuple[Stage, ...]:
        return self.spec.stages

    @property
    def on_error(self) -> OnError:
        routes = [s for s in self.spec.stages if isinstance(s, RouteBadRecords)]
        return routes[0].on_error if routes else "fail"

    @property
    def records_lost(self) -> int:
        return sum(lost.size for lost in self.lost)

    def describe_lost(self) -> list[str]:
        """One line per partition with lost offsets, naming topic, partition and range."""
        return [
            lost_offsets_text(self.topic, lost.partition, lost.start, lost.end)
            for lost in self.lost
        ]


class PublishTable(ActionBase):
    """Register or update the table's metadata pointer in catalogs of its `publish_to`
    whose pointer is missing or stale (planned when nothing else commits to the table;
    apply publishes after every commit anyway)."""

    kind: Literal["publish_table"] = "publish_table"
    change: Literal["update"] = "update"
    catalogs: tuple[str, ...] = Field(
        description="Catalogs to publish to (names in publish_catalogs)"
    )
    details: tuple[str, ...] = Field((), description="Why, one line per catalog")


class MaintenanceDue(ActionBase):
    """Maintenance due on the table: information only (`tableflow run` or
    `tableflow maintain` runs it; apply does not)."""

    kind: Literal["maintenance_due"] = "maintenance_due"
    change: Literal["report"] = "report"
    operations: tuple[str, ...] = Field(description="Each operation due and why")


Action = Annotated[
    CreateNamespace
    | CreateTable
    | CreateTopic
    | EvolveSchema
    | UpdateProperties
    | ChangePartitionSpec
    | ChangeSortOrder
    | ReplaceTable
    | UndeclaredTable
    | DropTable
    | Ingest
    | PublishTable
    | MaintenanceDue,
    Field(discriminator="kind"),
]

DDL_KINDS = frozenset(
    {
        "create_namespace",
        "create_table",
        "evolve_schema",
        "update_properties",
        "change_partition_spec",
        "change_sort_order",
        "replace_table",
        "drop_table",
    }
)


BlockerKind = Literal["not_supported", "destructive", "invalid"]


class Blocker(Frozen):
    """Why the plan cannot be applied as is (not supported yet, destructive, ...)."""

    kind: BlockerKind
    table: str | None
    key: str | None = Field(None, description="The config key responsible")
    location: str | None = Field(None, description="file:line of that key")
    message: str

    @classmethod
    def at(cls, table: Table, key: str, kind: BlockerKind, message: str) -> Blocker:
        """A blocker of `table`'s config key `key`, at that key's file:line."""
        location = str(table.location_of(key))
        return cls(kind=kind, table=table.name, key=key, location=location, message=message)


class PlanWarning(Frozen):
    """What apply will do that the user must choose knowingly (the plan still applies):
    `plan`, `apply` and `run` show it."""

    table: str | None
    key: str | None = Field(None, description="The config key it is about")
    location: str | None = Field(None, description="file:line of that key")
    message: str

    @classmethod
    def at(cls, table: Table, key: str, message: str) -> PlanWarning:
        """A warning about `table`'s config key `key`, at that key's file:line."""
        location = str(table.location_of(key))
        return cls(table=table.name, key=key, location=location, message=message)
