"""The resolved project: config files merged, defaults applied, target chosen.

This is what every command works from. It is immutable and carries where each
table came from, so later stages (plan) can point at the line of a key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tableflow_core.config.models.checks import Check
from tableflow_core.config.models.dead_letter import DeadLetterTarget
from tableflow_core.config.models.files import ProjectConfig
from tableflow_core.config.models.formats import Format
from tableflow_core.config.models.layout import PartitionField, SortField
from tableflow_core.config.models.maintenance import Maintenance
from tableflow_core.config.models.tables import MetadataColumn, StartFrom, TableFormatName
from tableflow_core.config.models.targets import Target
from tableflow_core.config.models.transforms import Transform
from tableflow_core.redaction import redact_text


@dataclass(frozen=True)
class SourceLocation:
    file: Path
    line: int | None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else str(self.file)

    def relative_to(self, root: Path) -> str:
        """`tables/orders.yml:2`: the file relative to `root` when inside it."""
        file = self.file.relative_to(root) if self.file.is_relative_to(root) else self.file
        return f"{file}:{self.line}" if self.line else str(file)


@dataclass(frozen=True)
class Table:
    """A table with every default applied."""

    name: str
    topic: str
    namespace: tuple[str, ...]
    table: str
    value: Format
    key: Format
    mode: Literal["append", "upsert"]
    key_columns: tuple[str, ...]
    partition_by: tuple[PartitionField, ...]
    sort_by: tuple[SortField, ...]
    properties: dict[str, str]
    metadata_columns: tuple[MetadataColumn, ...]
    start_from: Literal["earliest", "latest"] | StartFrom
    max_records_per_run: int | None
    transforms: tuple[Transform, ...]
    checks: tuple[Check, ...]
    on_error: Literal["fail", "skip", "dlq"]
    dlq: DeadLetterTarget | None
    refresh_interval_s: float
    publish_to: tuple[str, ...]
    tags: tuple[str, ...]
    description: str | None
    source: SourceLocation
    # Line of each key the user wrote for this table (for "not supported yet" and plan messages).
    key_lines: dict[str, int] = field(default_factory=dict)
    # Table formats kept: always iceberg, plus delta (a Delta log over the same files).
    formats: tuple[TableFormatName, ...] = ("iceberg",)
    # The table's maintenance block over `defaults.maintenance` (None: no maintenance).
    maintenance: Maintenance | None = None
    # `refresh_interval` as written (`5m`), for what users read; "" when not known.
    refresh_interval: str = ""
    # Records deleted from the topic before the table read them: fail, or accept the loss.
    on_data_loss: Literal["fail", "accept"] = "fail"

    @property
    def identifier(self) -> str:
        """`namespace.table`."""
        return ".".join((*self.namespace, self.table))

    def location_of(self, key: str) -> SourceLocation:
        return SourceLocation(self.source.file, self.key_lines.get(key, self.source.line))


@dataclass(frozen=True)
class DevStackUse:
    """What the target's config took from the project's local stack (`dev_stack()`):
    commands that connect check those components run (`dev.stack.require_running`)."""

    data_dir: Path
    components: frozenset[str]
    started: bool  # the stack's record existed (`dev up` ran at least once)


@dataclass(frozen=True)
class Project:
    """A loaded, validated project for one target."""

    root: Path
    config: ProjectConfig
    config_file: Path
    target_name: str
    tables: tuple[Table, ...]
    secrets: frozenset[str] = frozenset()
    dev_stack_use: DevStackUse | None = None

    @property
    def target(self) -> Target:
        return self.config.targets[self.target_name]

    @property
    def name(self) -> str:
        return self.config.name

    def table(self, name: str) -> Table:
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(name)

    def redact(self, text: str) -> str:
        """`text` without the project's secrets: `SecretStr` values, values of secret
        settings (`kafka.config` passwords, catalog tokens...) and URL passwords, known
        or not (`tableflow_core/redaction.py`)."""
        return redact_text(text, self.secrets)

    def resolve_path(self, path: str) -> Path:
        """A path from the config, relative to the project root unless absolute."""
        candidate = Path(path).expanduser()
        return candidate if candidate.is_absolute() else (self.root / candidate).resolve()
