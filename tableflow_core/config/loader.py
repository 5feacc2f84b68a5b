"""Loading a project directory: render, parse, validate, merge defaults."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from tableflow_core.config.dev_stack import DEFAULT_DATA_DIR
from tableflow_core.config.dev_stack import VALUES as STACK_VALUES
from tableflow_core.config.errors import ConfigError, ConfigProblem
from tableflow_core.config.models.base import parse_duration_seconds
from tableflow_core.config.models.files import ProjectConfig, TableFile
from tableflow_core.config.models.formats import Format
from tableflow_core.config.models.tables import (
    CDC_MIRROR_COLUMNS,
    TableConfig,
    TableDefaults,
    needs_dead_letter_target,
)
from tableflow_core.config.names import shown
from tableflow_core.config.project import DevStackUse, Project, SourceLocation, Table
from tableflow_core.config.rendering import (
    RenderContext,
    RenderError,
    is_template,
    render_document,
    render_tree,
    render_value,
)
from tableflow_core.config.validation import validate_document
from tableflow_core.config.yaml_source import (
    FieldPath,
    YamlDocument,
    dotted_path,
    load_yaml,
    read_project_file,
)
from tableflow_core.redaction import secrets_in_settings

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

    Collects every problem across all files before raising one ConfigError; every
    bad project ends in a ConfigError naming the file (and line where there is one).
    """
    root = project_dir.resolve()
    project_file = find_project_file(root)
    if var_overrides is not None and not isinstance(var_overrides, Mapping):
        raise ConfigError([ConfigProblem("--vars must be a mapping of names to values")], root)
    overrides = {str(key): value for key, value in (var_overrides or {}).items()}
    raw = _parse_file(project_file, root)
    target_name = target or _default_target(raw, overrides, environ)
    # The file's own `vars:` block is rendered first (var() there sees only --vars).
    variables, problems = _declared_vars(raw, overrides, target_name, environ)
    stack_dir = _dev_stack_dir(raw, root, target_name, {**variables, **overrides}, environ)
    context = RenderContext(
        {**variables, **overrides}, target_name, environ, dev_stack_dir=stack_dir
    )
    document, render_problems = render_document(raw, context)
    problems.extend(render_problems)
    if problems:
        # `vars:` is rendered twice (alone first, then with the file): report its errors once.
        raise ConfigError(list(dict.fromkeys(problems)), root)
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
    key_lines = _table_key_lines(document)
    for index, table_config in enumerate(config.tables):
        tables.append(
            _resolve_table(table_config, config.defaults, document, ("tables", index), key_lines)
        )
    table_files, path_problems = _table_files(root, config.table_paths, document)
    problems.extend(path_problems)
    for table_file in table_files:
        try:
            table_doc, file_problems = render_document(_parse_file(table_file, root), context)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        problems.extend(file_problems)
        if file_problems or table_doc.data is None:
            continue
        parsed, file_problems = validate_document(TableFile, table_doc)
        problems.extend(file_problems)
        if parsed is not None:
            key_lines = _table_key_lines(table_doc)
            for index, table_config in enumerate(parsed.tables):
                tables.append(
                    _resolve_table(
                        table_config, config.defaults, table_doc, ("tables", index), key_lines
                    )
                )
    problems.extend(_duplicate_problems(tables))
    problems.extend(_reference_problems(tables, config, target_name))
    problems.extend(_dead_letter_problems(tables))
    if problems:
        raise ConfigError(problems, root)
    return Project(
        root=root,
        config=config,
        config_file=project_file,
        target_name=target_name,
        tables=tuple(tables),
        # Table files hold secrets too (mask salts, secret-looking table properties).
        secrets=frozenset(
            [
                *_collect_secrets([config, *(t.transforms for t in tables)]),
                *secrets_in_settings(config.model_dump(mode="json")),
                *secrets_in_settings([t.properties for t in tables]),
                *context.stack_secrets_read,
            ]
        ),
        dev_stack_use=_dev_stack_use(context),
    )


def _dev_stack_use(context: RenderContext) -> DevStackUse | None:
    if not context.stack_names_read or context.dev_stack_dir is None:
        return None
    return DevStackUse(
        data_dir=context.dev_stack_dir,
        components=frozenset(STACK_VALUES[n].component for n in context.stack_names_read),
        started=context.stack_started,
    )


def _dev_stack_dir(
    raw: YamlDocument,
    root: Path,
    target_name: str,
    variables: Mapping[str, Any],
    environ: Mapping[str, str] | None,
) -> Path | None:
    """Where the target's local stack keeps its record: `dev_stack.data_dir` (rendered
    first, without `dev_stack()`), None when the target has no `dev_stack:` section."""
    data = raw.data if isinstance(raw.data, dict) else {}
    targets = data.get("targets")
    target = targets.get(target_name) if isinstance(targets, dict) else None
    section = target.get("dev_stack", False) if isinstance(target, dict) else False
    if section is False or (section is not None and not isinstance(section, dict)):
        return None  # no section (validation reports one that is not a mapping)
    value = (section or {}).get("data_dir", DEFAULT_DATA_DIR)
    if is_template(value):
        try:
            value = render_value(value, RenderContext(variables, target_name, environ))
        except RenderError:
            return None  # rendering the whole file reports it at its line
    if not isinstance(value, str):
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else (root / path).resolve()


def _parse_file(file: Path, root: Path) -> YamlDocument:
    try:
        return load_yaml(read_project_file(file), file)
    except ConfigError as exc:
        raise ConfigError(exc.problems, root) from None


def _default_target(
    raw: YamlDocument, overrides: Mapping[str, Any], environ: Mapping[str, str] | None
) -> str:
    """`default_target`, rendered before the target is known (`target.name` is empty there)."""
    value = raw.data.get("default_target") if isinstance(raw.data, dict) else None
    if value is None:
        return "dev"
    if not isinstance(value, str):
        raise ConfigError(
            [
                ConfigProblem(
                    "default_target must be a string",
                    raw.file,
                    raw.line_of(("default_target",)),
                    "default_target",
                )
            ]
        )
    if not is_template(value):
        return value
    context = RenderContext(overrides, "", environ)
    try:
        return render_value(value, context)
    except RenderError as exc:
        message = context.redact(str(exc))
        line = raw.line_of(("default_target",))
        raise ConfigError([ConfigProblem(message, raw.file, line, "default_target")]) from None


def _declared_vars(
    raw: YamlDocument,
    overrides: Mapping[str, Any],
    target_name: str,
    environ: Mapping[str, str] | None,
) -> tuple[dict[str, Any], list[ConfigProblem]]:
    data = raw.data if isinstance(raw.data, dict) else {}
    declared = data.get("vars")
    if not isinstance(declared, dict):
        return {}, []  # validation reports a `vars` that is not a mapping
    problems: list[ConfigProblem] = []
    context = RenderContext(overrides, target_name, environ, strict_vars=False)
    rendered = render_tree(raw, declared, ("vars",), context, problems)
    return {str(key): value for key, value in rendered.items()}, problems


def _table_files(
    root: Path, table_paths: list[str], document: YamlDocument
) -> tuple[list[Path], list[ConfigProblem]]:
    """Table files under `table_paths`; each path, and each file found, must stay inside the project."""
    files: list[Path] = []
    seen: set[Path] = set()
    problems: list[ConfigProblem] = []
    for index, folder in enumerate(table_paths):
        where = ("table_paths", index)

        def problem(message: str, where: FieldPath = where) -> ConfigProblem:
            return ConfigProblem(
                message, document.file, document.line_of(where), dotted_path(where)
            )

        try:
            base = (root / folder).resolve()
        except (OSError, RuntimeError, ValueError) as exc:
            problems.append(problem(f"invalid table path {shown(folder)}: {_os_reason(exc)}"))
            continue
        if not base.is_relative_to(root):
            problems.append(problem(f"table path {shown(folder)} is outside the project directory"))
            continue
        try:
            for path in _files_under(base):
                resolved = path.resolve()
                if not resolved.is_relative_to(root):
                    problems.append(
                        ConfigProblem(
                            "table file is a link to a file outside the project directory",
                            path,
                        )
                    )
                elif resolved.is_file() and resolved not in seen:
                    seen.add(resolved)
                    files.append(resolved)
        except (OSError, RuntimeError) as exc:
            # e.g. a name longer than the file system allows (ENAMETOOLONG), a link loop
            problems.append(problem(f"cannot read table path {shown(folder)}: {_os_reason(exc)}"))
    return files, problems


def _table_key_lines(document: YamlDocument) -> dict[FieldPath, dict[str, int]]:
    """For each `("tables", i)`, the line of every key below it, by relative dotted path
    ("transforms[1].where"), so errors about one item of a list can point at its own line.

    One pass over the document's lines (grouping per table is linear: looking each
    table's keys up among all lines took 49 s for 3,000 tables)."""
    by_table: dict[FieldPath, dict[str, int]] = {}
    for key_path, line in document.lines.items():
        if len(key_path) > 2 and key_path[0] == "tables":
            by_table.setdefault(key_path[:2], {})[dotted_path(key_path[2:])] = line
    return by_table


def _files_under(base: Path) -> list[Path]:
    """The table files at `base` (a file, or the YAML files below a folder); [] if missing."""
    if not base.exists():
        return []
    if base.is_file():
        return [base]
    return sorted(p for p in base.rglob("*") if p.suffix in TABLE_FILE_SUFFIXES)


def _os_reason(exc: BaseException) -> str:
    """The OS's reason without the path it names (which may be 70,000 characters)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


def _resolve_table(
    table: TableConfig,
    defaults: TableDefaults,
    document: YamlDocument,
    path: FieldPath,
    table_key_lines: dict[FieldPath, dict[str, int]],
) -> Table:
    namespace = table.namespace or defaults.namespace or "default"
    key_lines = table_key_lines.get(path, {})
    metadata = (
        table.metadata_columns if table.metadata_columns is not None else defaults.metadata_columns
    )
    value = table.value or defaults.value or Format(format="avro")
    mode = table.mode or defaults.mode
    if value.envelope is not None and mode == "upsert":
        # A mirror keeps each row's source position: the order of a key's changes.
        metadata = [
            *(metadata or ()),
            *(c for c in CDC_MIRROR_COLUMNS if c not in (metadata or ())),
        ]
    return Table(
        name=table.name,
        topic=table.topic,
        namespace=tuple(namespace.split(".")),
        table=table.table or table.name,
        value=value,
        key=table.key or defaults.key or Format(format="string"),
        mode=mode,
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
        on_data_loss=table.on_data_loss or defaults.on_data_loss,
        dlq=table.dlq or defaults.dlq,
        refresh_interval_s=parse_duration_seconds(
            table.refresh_interval or defaults.refresh_interval
        ),
        refresh_interval=(table.refresh_interval or defaults.refresh_interval).strip(),
        publish_to=tuple(table.publish_to),
        tags=tuple(dict.fromkeys([*defaults.tags, *table.tags])),
        description=table.description,
        source=SourceLocation(document.file, document.line_of(path)),
        key_lines=key_lines,
        formats=tuple(table.formats or defaults.formats),
        maintenance=(
            table.maintenance.merged_over(defaults.maintenance)
            if table.maintenance is not None
            else defaults.maintenance
        ),
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


def _dead_letter_problems(tables: list[Table]) -> list[ConfigProblem]:
    """on_error dlq (or a check's on_failure dlq) needs a target, here or in `defaults`."""
    problems: list[ConfigProblem] = []
    for table in tables:
        key = needs_dead_letter_target(table.on_error, table.checks)
        if key is None or table.dlq is not None:
            continue
        location = table.location_of(key)
        problems.append(
            ConfigProblem(
                f"table {table.name!r}: {key} routes bad records to a dead-letter queue but no "
                "`dlq` target is set: add `dlq: {type: kafka, topic: ...}` or "
                "`dlq: {type: iceberg, table: ns.table}` to the table or to `defaults`",
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
