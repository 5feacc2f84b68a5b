"""Loading a project directory: render, parse, validate, merge defaults."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from tableflow_core.config.errors import ConfigError, ConfigProblem
from tableflow_core.config.models import (
    Format,
    ProjectConfig,
    TableConfig,
    TableDefaults,
    TableFile,
    parse_duration_seconds,
)
from tableflow_core.config.project import Project, SourceLocation, Table
from tableflow_core.config.rendering import render_template
from tableflow_core.config.validation import validate_document
from tableflow_core.config.yaml_source import YamlDocument, dotted_path, load_yaml

PROJECT_FILE = "tableflow_project.yml"
TABLE_FILE_SUFFIXES = (".yml", ".yaml")


def find_project_file(project_dir: Path) -> Path:
    candidate = project_dir / PROJECT_FILE
    if not candidate.is_file():
        raise ConfigError(
            [
                ConfigProblem(
                    f"no {PROJECT_FILE} in {project_dir.resolve()} (use --project-dir or `tableflow init`)"
                )
            ]
        )
    return candidate


def load_project(
    project_dir: Path,
    target: str | None = None,
    var_overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Project:
    """Load and validate the project in `project_dir` for `target` (default: default_target).

    Collects every problem across all files before raising one ConfigError.
    """
    root = project_dir.resolve()
    project_file = find_project_file(root)
    raw_text = project_file.read_text()
    target_name = target or _default_target(raw_text, project_file)
    overrides = dict(var_overrides or {})
    # First pass only reads the file's own `vars:`; the second renders with them.
    first_pass = _render_and_parse(
        raw_text, project_file, overrides, target_name, environ, strict_vars=False
    )
    variables = {**_declared_vars(first_pass), **overrides}
    document = _render_and_parse(raw_text, project_file, variables, target_name, environ)
    config, problems = validate_document(ProjectConfig, document)
    if config is None:
        raise ConfigError(problems, root)
    if target_name not in config.targets:
        line = document.line_of(("targets",))
        raise ConfigError(
            [
                ConfigProblem(
                    f"unknown target {target_name!r}; defined: {', '.join(sorted(config.targets))}",
                    project_file,
                    line,
                )
            ],
            root,
        )
    tables: list[Table] = []
    for index, table_config in enumerate(config.tables):
        tables.append(_resolve_table(table_config, config.defaults, document, ("tables", index)))
    for table_file in _table_files(root, config.table_paths):
        table_doc = _render_and_parse(
            table_file.read_text(), table_file, variables, target_name, environ
        )
        if table_doc.data is None:
            continue
        parsed, file_problems = validate_document(TableFile, table_doc)
        problems.extend(file_problems)
        if parsed is not None:
            for index, table_config in enumerate(parsed.tables):
                tables.append(
                    _resolve_table(table_config, config.defaults, table_doc, ("tables", index))
                )
    problems.extend(_duplicate_problems(tables))
    problems.extend(_reference_problems(tables, config, target_name))
    if problems:
        raise ConfigError(problems, root)
    return Project(
        root=root,
        config=config,
        config_file=project_file,
        target_name=target_name,
        tables=tuple(tables),
        # Table files hold secrets too (mask salts).
        secrets=frozenset(_collect_secrets([config, *(t.transforms for t in tables)])),
    )


def _default_target(raw_text: str, file: Path) -> str:
    """`default_target` read before rendering (rendering needs the target name)."""
    for line in raw_text.splitlines():
        stripped = line.strip()
        if line.startswith("default_target:"):
            value = stripped.split(":", 1)[1].strip().strip("'\"")
            if value and "{" not in value:
                return value
    return "dev"


def _render_and_parse(
    text: str,
    file: Path,
    variables: Mapping[str, Any],
    target_name: str,
    environ: Mapping[str, str] | None,
    strict_vars: bool = True,
) -> YamlDocument:
    rendered = render_template(text, file, variables, target_name, environ, strict_vars=strict_vars)
    return load_yaml(rendered, file)


def _declared_vars(document: YamlDocument) -> dict[str, Any]:
    data = document.data if isinstance(document.data, dict) else {}
    declared = data.get("vars") or {}
    return dict(declared) if isinstance(declared, dict) else {}


def _table_files(root: Path, table_paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for folder in table_paths:
        base = (root / folder).resolve()
        if not base.exists():
            continue
        if base.is_file():
            files.append(base)
            continue
        files.extend(
            sorted(p for p in base.rglob("*") if p.suffix in TABLE_FILE_SUFFIXES and p.is_file())
        )
    return files


def _resolve_table(
    table: TableConfig, defaults: TableDefaults, document: YamlDocument, path: tuple[str | int, ...]
) -> Table:
    namespace = table.namespace or defaults.namespace or "default"
    # Every key below the table, as a relative dotted path ("transforms[1].where"), so
    # errors about one item of a list can point at its own line.
    key_lines = {
        dotted_path(key_path[len(path) :]): line
        for key_path, line in document.lines.items()
        if len(key_path) > len(path) and key_path[: len(path)] == path
    }
    metadata = (
        table.metadata_columns if table.metadata_columns is not None else defaults.metadata_columns
    )
    return Table(
        name=table.name,
        topic=table.topic,
        namespace=tuple(namespace.split(".")),
        table=table.table or table.name,
        value=table.value or defaults.value or Format(format="avro"),
        key=table.key or defaults.key or Format(format="string"),
        mode=table.mode or defaults.mode,
        key_columns=tuple(table.key_columns),
        partition_by=tuple(table.partition_by),
        sort_by=tuple(table.sort_by),
        properties={**defaults.properties, **table.properties},
        metadata_columns=tuple(metadata or ()),
        start_from=table.start_from or defaults.start_from,
        max_records_per_run=table.max_records_per_run or defaults.max_records_per_run,
        transforms=tuple(table.transforms),
        checks=tuple(table.checks),
        on_error=table.on_error or defaults.on_error,
        dlq=table.dlq,
        refresh_interval_s=parse_duration_seconds(
            table.refresh_interval or defaults.refresh_interval
        ),
        publish_to=tuple(table.publish_to),
        tags=tuple(dict.fromkeys([*defaults.tags, *table.tags])),
        description=table.description,
        source=SourceLocation(document.file, document.line_of(path)),
        key_lines=key_lines,
    )


def _duplicate_problems(tables: list[Table]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    by_name: dict[str, Table] = {}
    by_identifier: dict[str, Table] = {}
    for table in tables:
        if table.name in by_name:
            first = by_name[table.name]
            problems.append(
                ConfigProblem(
                    f"table name {table.name!r} is declared twice (first at {first.source})",
                    table.source.file,
                    table.source.line,
                )
            )
        by_name.setdefault(table.name, table)
        if table.identifier in by_identifier and by_identifier[table.identifier] is not table:
            first = by_identifier[table.identifier]
            problems.append(
                ConfigProblem(
                    f"tables {first.name!r} and {table.name!r} both write {table.identifier}",
                    table.source.file,
                    table.source.line,
                )
            )
        by_identifier.setdefault(table.identifier, table)
    return problems


def _reference_problems(
    tables: list[Table], config: ProjectConfig, target_name: str
) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    target = config.targets[target_name]
    for table in tables:
        for name in table.publish_to:
            if name not in target.publish_catalogs:
                location = table.location_of("publish_to")
                problems.append(
                    ConfigProblem(
                        f"table {table.name!r} publishes to {name!r}, which target {target_name!r} "
                        f"does not define in publish_catalogs",
                        location.file,
                        location.line,
                    )
                )
        uses_registry = any(
            f.format in ("avro", "json_schema", "protobuf") for f in (table.value, table.key)
        )
        if uses_registry and target.schema_registry is None:
            location = table.location_of("value")
            problems.append(
                ConfigProblem(
                    f"table {table.name!r} uses a registry format but target {target_name!r} has no schema_registry",
                    location.file,
                    location.line,
                )
            )
    return problems


def _collect_secrets(value: Any) -> list[str]:
    """Every SecretStr value inside a config model tree."""
    found: list[str] = []
    if isinstance(value, SecretStr):
        found.append(value.get_secret_value())
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            found.extend(_collect_secrets(getattr(value, name)))
    elif isinstance(value, dict):
        for item in value.values():
            found.extend(_collect_secrets(item))
    elif isinstance(value, list | tuple):
        for item in value:
            found.extend(_collect_secrets(item))
    return found
