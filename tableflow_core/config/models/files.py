"""The two kinds of file users write: `tableflow_project.yml` and the table files under
`table_paths`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from tableflow_core.config.models.base import IDENTIFIER, ConfigModel
from tableflow_core.config.models.tables import TableConfig, TableDefaults
from tableflow_core.config.models.targets import Target
from tableflow_core.config.names import MAX_NAME_LENGTH


class TableFile(ConfigModel):
    """A file under `table_paths`: a list of tables."""

    tables: list[TableConfig] = Field(
        default_factory=list, description="Tables declared in this file."
    )


class ProjectConfig(ConfigModel):
    """`tableflow_project.yml`."""

    name: str = Field(pattern=IDENTIFIER, max_length=MAX_NAME_LENGTH, description="Project name.")
    config_version: Literal[1] = Field(1, description="Version of this file format.")
    default_target: str = Field("dev", description="Target used when --target is not given.")
    targets: dict[str, Target] = Field(min_length=1, description="Deployment targets by name.")
    vars: dict[str, Any] = Field(
        default_factory=dict, description="Variables for `{{ var('x') }}`."
    )
    table_paths: list[str] = Field(
        default_factory=lambda: ["tables"], description="Folders with table YAML files."
    )
    defaults: TableDefaults = Field(default_factory=TableDefaults, description="Table defaults.")
    tables: list[TableConfig] = Field(default_factory=list, description="Tables declared inline.")

    @model_validator(mode="after")
    def _default_target_exists(self) -> ProjectConfig:
        if self.default_target not in self.targets:
            raise ValueError(
                f"default_target {self.default_target!r} is not one of targets: {sorted(self.targets)}"
            )
        return self
